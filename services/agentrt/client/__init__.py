"""The Python client of the mesh: long-lived channels and typed stubs with auth and tenant.

Used by the CLI, the tests, and services calling their peers. See `channels.py`.
"""

from agentrt.client.channels import MeshClient, grpc_target, open_channel

__all__ = ["MeshClient", "grpc_target", "open_channel"]
