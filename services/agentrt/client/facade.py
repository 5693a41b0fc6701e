"""`AgentrtClient`: the typed surface a Python program drives the mesh with.

The same surface as the TypeScript client (@agentrt/client): start a run, iterate its events
with automatic resume (`client/events.py`), answer approvals, read a run and a session. It
sits on `MeshClient` (one long-lived channel per service) whose channels carry the bearer
token and the tenant on every call kind. Every method raises `AgentrtError` (status code +
the contract's ErrorReason) for a failed call; the stubs stay reachable as `mesh.run_service`
and `mesh.session_service` for everything the surface does not wrap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeVar

import grpc

from agentrt.client.channels import MeshClient
from agentrt.client.errors import to_agentrt_error
from agentrt.client.events import Reconnect, follow_events
from agentrt.v1 import common_pb2, run_service_pb2, session_service_pb2

T = TypeVar("T")


async def _call(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except grpc.RpcError as exc:
        raise to_agentrt_error(exc) from exc


class AgentrtClient:
    """The mesh, as a Python program drives it (see the module docstring).

    Args:
        runs: RunService "host:port".
        sessions: SessionService "host:port"; needed by the session methods only.
        token: bearer token sent on every call ("" sends none).
        tenant: tenant sent on every call as x-agentrt-tenant ("" = the server's default).
    """

    def __init__(self, runs: str, *, sessions: str = "", token: str = "", tenant: str = "") -> None:
        self.mesh = MeshClient(runs=runs, sessions=sessions, token=token, tenant=tenant)

    async def __aenter__(self) -> AgentrtClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channels."""
        await self.mesh.close()

    async def start_run(self, request: run_service_pb2.StartRunRequest) -> run_service_pb2.StartRunResponse:
        """Start a run; returns once it is recorded, with its run id and session id.

        Raises:
            AgentrtError: e.g. INVALID_ARGUMENT/INVALID_AGENT, NOT_FOUND/AGENT_NOT_FOUND,
                FAILED_PRECONDITION/SESSION_BUSY.
        """
        return await _call(lambda: self.mesh.run_service.StartRun(request))

    def events(
        self,
        run_id: str = "",
        *,
        session_id: str = "",
        after_seq: int = 0,
        max_reconnects: int = 8,
        on_reconnect: Callable[[Reconnect], None] | None = None,
    ) -> AsyncIterator[run_service_pb2.RunEvent]:
        """Iterate a run's (or a session's) events with automatic resume; see `follow_events`.

        Gaps are yielded as `gap` events; a run's iteration ends after `stream_end`.
        """
        return follow_events(
            self.mesh.run_service,
            run_id=run_id,
            session_id=session_id,
            after_seq=after_seq,
            max_reconnects=max_reconnects,
            on_reconnect=on_reconnect,
        )

    async def get_run(self, run_id: str) -> run_service_pb2.Run:
        """Read a run's record. Raises AgentrtError NOT_FOUND/RUN_NOT_FOUND."""
        request = run_service_pb2.GetRunRequest(run_id=run_id)
        return (await _call(lambda: self.mesh.run_service.GetRun(request))).run

    async def resume_run(
        self,
        run_id: str,
        decisions: Iterable[run_service_pb2.ApprovalDecision] = (),
        results: Iterable[common_pb2.ToolResult] = (),
    ) -> run_service_pb2.Run:
        """Answer a suspended run: approval decisions, and results of client-declared tools.

        Raises:
            AgentrtError: FAILED_PRECONDITION/RUN_NOT_SUSPENDED (nothing waits, or an earlier
                answer already landed), INVALID_ARGUMENT for a call id that is not pending.
        """
        request = run_service_pb2.ResumeRunRequest(run_id=run_id, decisions=decisions, results=results)
        return (await _call(lambda: self.mesh.run_service.ResumeRun(request))).run

    async def approve(
        self, run_id: str, call_id: str, approved: bool = True, message: str = ""
    ) -> run_service_pb2.Run:
        """Approve (or deny, with a message for the model) one pending call; see `resume_run`."""
        decision = run_service_pb2.ApprovalDecision(call_id=call_id, approved=approved, message=message)
        return await self.resume_run(run_id, [decision])

    async def cancel_run(self, run_id: str, reason: str = "") -> run_service_pb2.Run:
        """Cancel a run (canceled is a terminal status, not an error)."""
        request = run_service_pb2.CancelRunRequest(run_id=run_id, reason=reason)
        return (await _call(lambda: self.mesh.run_service.CancelRun(request))).run

    async def get_session(self, session_id: str) -> session_service_pb2.Session:
        """Read a session's record. Raises AgentrtError NOT_FOUND/SESSION_NOT_FOUND."""
        request = session_service_pb2.GetSessionRequest(
            session=session_service_pb2.SessionRef(session_id=session_id)
        )
        return (await _call(lambda: self.mesh.session_service.GetSession(request))).session

    async def list_entries(
        self, session_id: str, after_seq: int = 0, limit: int = 0
    ) -> list[session_service_pb2.Entry]:
        """Read a session's raw log after a seq (all branches) in seq order; limit 0 = all."""
        request = session_service_pb2.ListEntriesRequest(
            session=session_service_pb2.SessionRef(session_id=session_id), after_seq=after_seq, limit=limit
        )
        return list((await _call(lambda: self.mesh.session_service.ListEntries(request))).entries)

    async def get_context(self, session_id: str) -> list[session_service_pb2.Entry]:
        """Read a session's context view: the active branch, updates folded, compacted entries left out."""
        request = session_service_pb2.GetContextRequest(
            session=session_service_pb2.SessionRef(session_id=session_id)
        )
        return list((await _call(lambda: self.mesh.session_service.GetContext(request))).entries)
