"""The Python client of the mesh.

- `AgentrtClient` (`facade.py`): the surface programs use, the same as the TypeScript
  client's: start a run, iterate its events with automatic resume (`events.py`), answer
  approvals, read runs and sessions; failures are `AgentrtError`s (`errors.py`) carrying the
  contract's ErrorReason.
- `MeshClient` / `open_channel` (`channels.py`): long-lived channels and typed stubs, used by
  the CLI, the tests and services calling their peers; every call kind carries the bearer
  token and the tenant (`metadata.py`).
"""

from agentrt.client.channels import MeshClient, grpc_target, open_channel
from agentrt.client.errors import AgentrtError, to_agentrt_error
from agentrt.client.events import Reconnect, events_of, follow_events
from agentrt.client.facade import AgentrtClient

__all__ = [
    "AgentrtClient",
    "AgentrtError",
    "MeshClient",
    "Reconnect",
    "events_of",
    "follow_events",
    "grpc_target",
    "open_channel",
    "to_agentrt_error",
]
