"""agentrt: a runtime for LLM agents served as a mesh of gRPC services.

Subpackages: core (pure semantics), mesh (what every service shares), one package per
service (runs, gateway, tools, sessions, tasks), client (the Python client of the mesh),
cli (the `agentrt` command) and v1 (generated from protos/, never edited).
"""

__version__ = "0.1.0"
