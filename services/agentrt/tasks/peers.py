"""The task manager's door to RunService and SessionService (over gRPC, nothing in process).

The only module of the task manager besides the servicer and server that touches grpc.
Every call carries the task's tenant in metadata; a failed call is re-raised as the peer's
`MeshError` (status and reason preserved). A peer that is not reachable (a restart brings
the mesh up in any order: `agentrt up` starts RunService after this service) is waited
for: a call that failed below any server (UNAVAILABLE without ErrorInfo) is sent again
with capped backoff for up to `unavailable_s` seconds. Calls that are not safe to send
twice (CreateSession, AppendEntries without a guard) are re-sent only when the connection
was refused, i.e. nothing was sent. StartRun is safe: the task passes its launch id as
the idempotency key, so a second StartRun answers with the same run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import grpc

from agentrt.client.channels import MeshClient
from agentrt.client.events import events_of
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import from_rpc_error, reason_of
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import session_service_pb2 as spb

CALL_TIMEOUT_S = 30.0
#: CancelRun waits up to 30 s for a local run to record its end.
CANCEL_TIMEOUT_S = 45.0
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_NOT_SENT = ("failed to connect", "connection refused")

T = TypeVar("T")


def _transport_failure(err: grpc.aio.AioRpcError) -> bool:
    return err.code() == grpc.StatusCode.UNAVAILABLE and not reason_of(err)


def _not_sent(err: grpc.aio.AioRpcError) -> bool:
    text = (err.details() or "").lower()
    return _transport_failure(err) and any(marker in text for marker in _NOT_SENT)


def _md(tenant: str) -> list[tuple[str, str]]:
    return [(TENANT_HEADER, tenant)]


def ref(session_id: str, generation: int = 0) -> spb.SessionRef:
    """A session handle (generation 0 = whichever incarnation is current)."""
    return spb.SessionRef(session_id=session_id, generation=generation)


class Peers:
    """Typed calls to RunService and SessionService (see the module docstring)."""

    def __init__(self, client: MeshClient, unavailable_s: float = 30.0) -> None:
        """Wrap a MeshClient whose runs and sessions addresses are set."""
        self.client = client
        self.unavailable_s = unavailable_s

    async def close(self) -> None:
        """Close the channels."""
        await self.client.close()

    async def _call(self, send: Callable[[], Awaitable[T]], *, safe: bool = True) -> T:
        deadline = time.monotonic() + self.unavailable_s
        attempt = 0
        while True:
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                wait = _transport_failure(err) if safe else _not_sent(err)
                if not wait or time.monotonic() >= deadline:
                    raise from_rpc_error(err) from err
            step = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            await asyncio.sleep(max(0.0, min(step, deadline - time.monotonic())))
            attempt += 1

    # -- sessions ------------------------------------------------------------------------------

    async def get_session(self, tenant: str, session_id: str, generation: int = 0) -> spb.Session:
        """Return the session. Raises NOT_FOUND SESSION_NOT_FOUND / STALE_GENERATION."""
        resp = await self._call(
            lambda: self.client.session_service.GetSession(
                spb.GetSessionRequest(session=ref(session_id, generation)), metadata=_md(tenant),
                timeout=CALL_TIMEOUT_S,
            )
        )  # fmt: skip
        return resp.session

    async def create_hidden(
        self, tenant: str, parent_session_id: str, title: str, metadata: Mapping[str, str]
    ) -> spb.Session:
        """Create a hidden session serving parent_session_id (004 §2.5e); return it."""
        req = spb.CreateSessionRequest(
            hidden=True, parent_session_id=parent_session_id, title=title, metadata=dict(metadata)
        )
        resp = await self._call(
            lambda: self.client.session_service.CreateSession(
                req, metadata=_md(tenant), timeout=CALL_TIMEOUT_S
            ),
            safe=False,
        )
        return resp.session

    async def delete_session(self, tenant: str, session_id: str, generation: int) -> bool:
        """Delete that incarnation of a session; False when it was already gone."""
        try:
            await self._call(
                lambda: self.client.session_service.DeleteSession(
                    spb.DeleteSessionRequest(session=ref(session_id, generation)), metadata=_md(tenant),
                    timeout=CALL_TIMEOUT_S,
                )
            )  # fmt: skip
        except MeshError as err:
            if err.status == Status.NOT_FOUND:
                return False
            raise
        return True

    async def append(
        self, tenant: str, session: spb.SessionRef, entries: Sequence[spb.Entry], expected_last_seq: int
    ) -> list[spb.Entry]:
        """Append entries guarded by expected_last_seq (ABORTED/SEQ_MISMATCH when it moved)."""
        req = spb.AppendEntriesRequest(session=session, entries=entries, expected_last_seq=expected_last_seq)
        resp = await self._call(
            lambda: self.client.session_service.AppendEntries(
                req, metadata=_md(tenant), timeout=CALL_TIMEOUT_S
            )
        )
        return list(resp.entries)

    async def entries_after(self, tenant: str, session: spb.SessionRef, after_seq: int) -> list[spb.Entry]:
        """Return every raw log entry after a seq, in seq order (pages followed to the end)."""
        out: list[spb.Entry] = []
        while True:
            cursor = after_seq if not out else out[-1].seq
            resp = await self._call(
                lambda c=cursor: self.client.session_service.ListEntries(  # type: ignore[misc]
                    spb.ListEntriesRequest(session=session, after_seq=c), metadata=_md(tenant),
                    timeout=CALL_TIMEOUT_S,
                )
            )  # fmt: skip
            out.extend(resp.entries)
            if not resp.entries or out[-1].seq >= resp.last_seq:
                return out

    # -- runs ----------------------------------------------------------------------------------

    async def get_agent(self, tenant: str, name: str, version: int) -> rpb.AgentSpec:
        """Return a registered agent spec (NOT_FOUND AGENT_NOT_FOUND)."""
        resp = await self._call(
            lambda: self.client.run_service.GetAgent(
                rpb.GetAgentRequest(name=name, version=version), metadata=_md(tenant), timeout=CALL_TIMEOUT_S
            )
        )
        return resp.agent

    async def start_run(self, tenant: str, req: rpb.StartRunRequest) -> str:
        """Start a run (req carries the launch id as idempotency key); return its run id."""
        resp = await self._call(
            lambda: self.client.run_service.StartRun(req, metadata=_md(tenant), timeout=CALL_TIMEOUT_S)
        )
        return resp.run_id

    async def get_run(self, tenant: str, run_id: str) -> rpb.Run:
        """Return a run's record (NOT_FOUND RUN_NOT_FOUND)."""
        resp = await self._call(
            lambda: self.client.run_service.GetRun(
                rpb.GetRunRequest(run_id=run_id), metadata=_md(tenant), timeout=CALL_TIMEOUT_S
            )
        )
        return resp.run

    async def cancel_run(self, tenant: str, run_id: str, reason: str) -> rpb.Run:
        """Cancel a run; return it after RunService recorded the request.

        Raises:
            MeshError: FAILED_PRECONDITION/RUN_FINISHED (it had ended), NOT_FOUND/RUN_NOT_FOUND.
        """
        resp = await self._call(
            lambda: self.client.run_service.CancelRun(
                rpb.CancelRunRequest(run_id=run_id, reason=reason),
                metadata=_md(tenant),
                timeout=CANCEL_TIMEOUT_S,
            )
        )
        return resp.run

    async def inject_input(self, tenant: str, run_id: str, text: str, kind: int) -> int:
        """Queue text on an unfinished run (InjectInput); return its queue position.

        Not re-sent after it may have been received (a second send would queue it twice).

        Raises:
            MeshError: FAILED_PRECONDITION/RUN_FINISHED (it ended), NOT_FOUND/RUN_NOT_FOUND.
        """
        resp = await self._call(
            lambda: self.client.run_service.InjectInput(
                rpb.InjectInputRequest(run_id=run_id, text=text, kind=kind),  # type: ignore[arg-type]
                metadata=_md(tenant), timeout=CALL_TIMEOUT_S,
            ),
            safe=False,
        )  # fmt: skip
        return int(resp.position)

    async def list_runs(self, tenant: str, session_id: str) -> list[rpb.Run]:
        """Return the first page of a session's runs, newest first."""
        resp = await self._call(
            lambda: self.client.run_service.ListRuns(
                rpb.ListRunsRequest(session_id=session_id, page_size=100), metadata=_md(tenant),
                timeout=CALL_TIMEOUT_S,
            )
        )  # fmt: skip
        return list(resp.runs)

    async def run_events(self, tenant: str, run_id: str, after_seq: int) -> AsyncIterator[rpb.RunEvent]:
        """Follow a run's events after a seq until its stream ends (not re-sent: the caller resumes).

        Raises:
            MeshError: the stream failed (the caller reconnects with the last seq it saw).
        """
        call = self.client.run_service.StreamRunEvents(
            rpb.StreamRunEventsRequest(run_id=run_id, after_seq=after_seq, batch_events=True),
            metadata=_md(tenant),
        )
        try:
            async for message in call:
                for event in events_of(message):
                    yield event
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        finally:
            call.cancel()


def is_gone(err: MeshError) -> bool:
    """True for an answer that says "no such session/run" (never for a failure to look)."""
    return err.status == Status.NOT_FOUND


def is_finished(err: MeshError) -> bool:
    """True for CancelRun's "the run had already ended"."""
    return err.status == Status.FAILED_PRECONDITION and err.reason == Reason.RUN_FINISHED
