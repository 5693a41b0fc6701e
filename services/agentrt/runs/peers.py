"""The run loop's door to its peers: gateway, tool service, session store (over gRPC).

The only module of the run loop that touches grpc. Every call goes over the long-lived
channels of one `MeshClient`, carries the run's tenant in metadata, and a failed call is
re-raised as the peer's `MeshError` (status and reason preserved), so the loop and the
servicer pass a peer's NOT_FOUND/SESSION_NOT_FOUND on unchanged.

A peer that is not up yet (a restart brings the services up in any order, and a takeover
can resume a run ~ms before its tool service serves) is waited for: a call that fails at
the transport (UNAVAILABLE with no ErrorInfo from a server) is sent again with capped
backoff for up to `unavailable_s` seconds, then the UNAVAILABLE/DEPENDENCY_UNAVAILABLE
error is raised. Only calls that are safe to send twice are re-sent on any transport
failure (reads, fenced appends, ExecuteTool which the tool service journals by
run_id + call_id, a model stream that yielded nothing); CreateSession only when the
connection was refused, i.e. nothing was sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import from_rpc_error, reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import tool_service_pb2 as tpb

SESSION_CALL_TIMEOUT_S = 30.0
CATALOG_TTL_S = 30.0
#: Waits between re-sends to a peer that is not reachable, seconds (the last one repeats).
UNAVAILABLE_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
#: Text of a transport failure in which no byte of the call reached the peer.
_NOT_SENT = ("failed to connect", "connection refused")

T = TypeVar("T")


def _transport_failure(err: grpc.aio.AioRpcError) -> bool:
    """True when the call failed below any server (UNAVAILABLE with no ErrorInfo reason)."""
    return err.code() == grpc.StatusCode.UNAVAILABLE and not reason_of(err)


def _not_sent(err: grpc.aio.AioRpcError) -> bool:
    text = (err.details() or "").lower()
    return _transport_failure(err) and any(marker in text for marker in _NOT_SENT)


def _md(tenant: str) -> list[tuple[str, str]]:
    return [(TENANT_HEADER, tenant)]


class Peers:
    """Typed calls to the gateway, tools and sessions (see the module docstring)."""

    def __init__(self, client: MeshClient, tool_grace_s: float = 30.0, unavailable_s: float = 30.0) -> None:
        """Wrap a MeshClient whose gateway, tools and sessions addresses are set.

        Args:
            client: the long-lived channels.
            tool_grace_s: added to a tool's own timeout for the ExecuteTool deadline, seconds.
            unavailable_s: how long a call waits for an unreachable peer, seconds (0 = no wait).
        """
        self.client = client
        self._tool_grace_s = tool_grace_s
        self._unavailable_s = unavailable_s
        #: Calls re-sent because a peer was unreachable (for operators and tests).
        self.unavailable_retries = 0
        self._catalog: dict[str, cpb.ToolSpec] = {}
        self._catalog_time = 0.0

    async def close(self) -> None:
        """Close the channels."""
        await self.client.close()

    async def _call(self, send: Callable[[], Awaitable[T]], *, safe: bool = True) -> T:
        """Send a unary call; re-send it while the peer is unreachable (see the module docstring).

        Args:
            send: makes the call once.
            safe: the call may be sent twice; False re-sends only when nothing was sent.

        Raises:
            MeshError: the peer's error; UNAVAILABLE/DEPENDENCY_UNAVAILABLE once the peer
                stayed unreachable for `unavailable_s` seconds.
        """
        deadline = time.monotonic() + self._unavailable_s
        attempt = 0
        while True:
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                if not self._wait_more(err, safe, deadline, attempt):
                    raise from_rpc_error(err) from err
            await asyncio.sleep(self._backoff(attempt, deadline))
            attempt += 1

    def _wait_more(self, err: grpc.aio.AioRpcError, safe: bool, deadline: float, attempt: int) -> bool:
        if not (_transport_failure(err) if safe else _not_sent(err)):
            return False
        if time.monotonic() >= deadline:
            return False
        self.unavailable_retries += 1
        return True

    @staticmethod
    def _backoff(attempt: int, deadline: float) -> float:
        step = UNAVAILABLE_BACKOFF_S[min(attempt, len(UNAVAILABLE_BACKOFF_S) - 1)]
        return max(0.0, min(step, deadline - time.monotonic()))

    async def catalog(self, tenant: str) -> dict[str, cpb.ToolSpec]:
        """Return the tool catalog by name (cached for CATALOG_TTL_S seconds).

        Raises:
            MeshError: the tool service's error (UNAVAILABLE when it is down).
        """
        if self._catalog and time.monotonic() - self._catalog_time < CATALOG_TTL_S:
            return self._catalog
        resp = await self._call(
            lambda: self.client.tool_service.ListTools(
                tpb.ListToolsRequest(), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            )
        )
        self._catalog = {t.name: t for t in resp.tools}
        self._catalog_time = time.monotonic()
        return self._catalog

    async def create_session(self, tenant: str, title: str = "") -> str:
        """Create a session; return its id."""
        resp = await self._call(
            lambda: self.client.session_service.CreateSession(
                spb.CreateSessionRequest(title=title), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
            safe=False,
        )
        return resp.session.session_id

    async def get_session(self, tenant: str, session_id: str) -> spb.Session:
        """Return the session. Raises the session service's NOT_FOUND/SESSION_NOT_FOUND."""
        resp = await self._call(
            lambda: self.client.session_service.GetSession(
                spb.GetSessionRequest(session=spb.SessionRef(session_id=session_id)),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        )
        return resp.session

    async def context(self, tenant: str, session_id: str) -> tuple[list[spb.Entry], int, str]:
        """Return (the session's context entries in order, its last seq, the active leaf id)."""
        resp = await self._call(
            lambda: self.client.session_service.GetContext(
                spb.GetContextRequest(session=spb.SessionRef(session_id=session_id)),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        )
        return list(resp.entries), resp.last_seq, resp.leaf_entry_id

    async def tail(self, tenant: str, session_id: str, after_seq: int) -> tuple[list[spb.Entry], int]:
        """Return (the raw log entries after a seq, in seq order; the highest seq stored)."""
        resp = await self._call(
            lambda: self.client.session_service.ListEntries(
                spb.ListEntriesRequest(session=spb.SessionRef(session_id=session_id), after_seq=after_seq),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        )
        return list(resp.entries), resp.last_seq

    async def entries_after(self, tenant: str, session_id: str, after_seq: int) -> list[spb.Entry]:
        """Return the raw log entries after a seq."""
        return (await self.tail(tenant, session_id, after_seq))[0]

    async def append(
        self, tenant: str, session_id: str, entries: Sequence[spb.Entry], expected_last_seq: int | None
    ) -> list[spb.Entry]:
        """Append entries in one call (one transaction in the store); return them stored.

        Raises:
            MeshError: ABORTED/SEQ_MISMATCH when expected_last_seq no longer holds; the
                store's other errors.
        """
        req = spb.AppendEntriesRequest(session=spb.SessionRef(session_id=session_id), entries=entries)
        if expected_last_seq is not None:
            req.expected_last_seq = expected_last_seq
        # Fenced by expected_last_seq, a batch sent twice is refused (SEQ_MISMATCH), never doubled.
        resp = await self._call(
            lambda: self.client.session_service.AppendEntries(
                req, metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
            safe=expected_last_seq is not None,
        )
        return list(resp.entries)

    async def recover(self, tenant: str, session_id: str, retry_safe_tools: Sequence[str]) -> list[spb.Entry]:
        """Close the dangling tool calls of the session's active branch (004 §2.5h).

        Returns:
            The synthesized outputs appended (empty when nothing dangled). Idempotent: a
            second call appends nothing, so re-sending it is safe.
        """
        resp = await self._call(
            lambda: self.client.session_service.RecoverSession(
                spb.RecoverSessionRequest(
                    session=spb.SessionRef(session_id=session_id), retry_safe_tools=list(retry_safe_tools)
                ),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        )
        return list(resp.entries)

    async def switch_branch(self, tenant: str, session_id: str, leaf_entry_id: str) -> spb.Entry:
        """Make leaf_entry_id the session's active leaf; return the leaf-move entry.

        Not re-sent after a transport failure that may have reached the store (a second
        leaf move to the same leaf would be harmless, but the caller re-reads anyway).
        """
        resp = await self._call(
            lambda: self.client.session_service.SwitchBranch(
                spb.SwitchBranchRequest(
                    session=spb.SessionRef(session_id=session_id), leaf_entry_id=leaf_entry_id
                ),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
            safe=False,
        )
        return resp.entry

    async def generate_once(self, tenant: str, request: gpb.ModelRequest) -> gpb.GenerateResponse:
        """One blocking model call (Generate), for the run's own housekeeping (compaction summaries).

        Raises:
            MeshError: the gateway's error.
        """
        return await self._call(
            lambda: self.client.gateway_service.Generate(
                gpb.GenerateRequest(request=request), metadata=_md(tenant)
            ),
            safe=False,
        )

    async def count_tokens(self, tenant: str, request: gpb.ModelRequest) -> int:
        """Count a request's input tokens (CountTokens).

        Raises:
            MeshError: FAILED_PRECONDITION/TOKEN_COUNTING_UNSUPPORTED where the provider cannot.
        """
        resp = await self._call(
            lambda: self.client.gateway_service.CountTokens(
                gpb.CountTokensRequest(request=request), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            )
        )
        return int(resp.input_tokens)

    async def cancel_execution(
        self, tenant: str, run_id: str, call_id: str, attempt: int, reason: str
    ) -> tpb.CancelExecutionResponse:
        """Kill a call the tool service runs (or journal it never-started); see CancelExecution."""
        return await self._call(
            lambda: self.client.tool_service.CancelExecution(
                tpb.CancelExecutionRequest(
                    run_id=run_id, call_id=call_id, attempt=attempt, reason=reason[:256]
                ),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        )

    async def generate(
        self, tenant: str, request: gpb.ModelRequest
    ) -> AsyncIterator[gpb.StreamGenerateResponse]:
        """Stream one model call; yields deltas then the final response.

        Raises:
            MeshError: the gateway's error (RATE_LIMITED, PROVIDER_UNAVAILABLE, ...).
        """
        deadline = time.monotonic() + self._unavailable_s
        attempt = 0
        while True:
            call = self.client.gateway_service.StreamGenerate(
                gpb.StreamGenerateRequest(request=request), metadata=_md(tenant)
            )
            received = False
            try:
                async for message in call:
                    received = True
                    yield message
                return
            except grpc.aio.AioRpcError as err:
                # Once a delta went out, a second call could answer differently: never re-send.
                if received or not self._wait_more(err, True, deadline, attempt):
                    raise from_rpc_error(err) from err
            finally:
                call.cancel()
            await asyncio.sleep(self._backoff(attempt, deadline))
            attempt += 1

    async def execute(self, tenant: str, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse:
        """Execute one tool call (idempotent on run_id + call_id at the tool service).

        Raises:
            MeshError: the tool service's error.
        """
        timeout = (
            request.timeout.seconds + request.timeout.nanos / 1e9 if request.HasField("timeout") else 600.0
        )
        return await self._call(
            lambda: self.client.tool_service.ExecuteTool(
                request, metadata=_md(tenant), timeout=timeout + self._tool_grace_s
            )
        )

    async def stream_execute(
        self,
        tenant: str,
        request: tpb.ExecuteToolRequest,
        on_progress: Callable[[tpb.ToolProgress], None],
    ) -> tpb.ExecuteToolResponse:
        """Execute one tool call through StreamExecuteTool, passing its output chunks on.

        Re-sending is safe: the tool service answers a repeated (run_id, call_id) from its
        journal or joins the call in flight, so a stream cut by a restart is sent again
        (a chunk may then be passed on twice; the result is the call's one result).

        Args:
            tenant: the run's tenant.
            request: the call.
            on_progress: called with each output chunk, in order.

        Raises:
            MeshError: the tool service's error; INTERNAL when the stream ends without a result.
        """
        timeout = (
            request.timeout.seconds + request.timeout.nanos / 1e9 if request.HasField("timeout") else 600.0
        )

        async def send() -> tpb.ExecuteToolResponse:
            call = self.client.tool_service.StreamExecuteTool(
                tpb.StreamExecuteToolRequest(request=request),
                metadata=_md(tenant),
                timeout=timeout + self._tool_grace_s,
            )
            try:
                async for message in call:
                    if message.HasField("progress"):
                        on_progress(message.progress)
                    elif message.HasField("result"):
                        return message.result
            finally:
                call.cancel()
            raise MeshError(
                Status.INTERNAL, Reason.INTERNAL, "the tool service's stream ended without a result"
            )

        return await self._call(send)


__all__ = ["MeshError", "Peers"]
