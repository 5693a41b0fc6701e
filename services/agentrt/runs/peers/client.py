"""The run loop's door to its peers: gateway, tool service, session store (over gRPC).

`Peers` is the one object the loop holds: the session store's calls (sessions.py), the
tool service's (tools.py) and the gateway's model calls (gateway.py), over the channels and
waits they share (base.py: reaching a peer, the tenant, errors as the peer's `MeshError`).
The package is the only part of the run loop that touches grpc.
"""

from __future__ import annotations

from agentrt.runs.peers.base import MODEL_CALL_TIMEOUT_S, SESSION_CALL_TIMEOUT_S
from agentrt.runs.peers.gateway import ModelCalls
from agentrt.runs.peers.sessions import SessionCalls
from agentrt.runs.peers.tools import ToolCalls


class Peers(SessionCalls, ToolCalls, ModelCalls):
    """Typed calls to the gateway, tools and sessions (see the module docstring)."""


__all__ = ["MODEL_CALL_TIMEOUT_S", "SESSION_CALL_TIMEOUT_S", "Peers"]
