"""The run loop's calls to the tool service (ToolService): the catalog, sandboxes, executions.

A call is idempotent on (run_id, call_id, attempt) at the tool service (its execution
journal), so ExecuteTool, and a StreamExecuteTool cut after its first message, are sent
again when their replica went away; a turn's calls go over the run's stream of calls when
there is one (runs/peers/streams.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.status import from_rpc_error
from agentrt.runs.peers import streams
from agentrt.runs.peers.base import SESSION_CALL_TIMEOUT_S, PeerBase, meta, transport_failure
from agentrt.runs.peers.streams import NOT_SENT, TOOLS
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import tool_service_pb2 as tpb

#: Deadline of CreateSandbox / DestroySandbox, seconds (a container starts or is removed).
SANDBOX_CALL_TIMEOUT_S = 120.0
CATALOG_TTL_S = 30.0

#: Re-sends of a StreamExecuteTool cut after its first message (gRPC's policy cannot: a
#: stream is committed once a response arrived).
STREAM_RESENDS = 4


class ToolCalls(PeerBase):
    """Typed calls to the tool service."""

    async def catalog(self, tenant: str) -> dict[str, cpb.ToolSpec]:
        """Return the tool catalog by name (cached for CATALOG_TTL_S seconds).

        Raises:
            MeshError: the tool service's error (UNAVAILABLE when it is down).
        """
        if self._catalog and time.monotonic() - self._catalog_time < CATALOG_TTL_S:
            return self._catalog
        resp = await self._call(
            "tools",
            lambda: self.client.tool_service.ListTools(
                tpb.ListToolsRequest(), metadata=meta(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
        )
        self._catalog = {t.name: t for t in resp.tools}
        self._catalog_time = time.monotonic()
        return self._catalog

    async def create_sandbox(self, tenant: str, request: tpb.CreateSandboxRequest) -> tpb.Sandbox:
        """Create or adopt a run's sandbox (idempotent on its id and settings, 004 §2.7n).

        Raises:
            MeshError: the tool service's error (INVALID_ARGUMENT, FAILED_PRECONDITION
                SANDBOX_UNAVAILABLE or SANDBOX_FOREIGN, UNAVAILABLE when it is down).
        """
        resp = await self._call(
            "tools",
            lambda: self.client.tool_service.CreateSandbox(
                request, metadata=meta(tenant), timeout=SANDBOX_CALL_TIMEOUT_S
            ),
        )
        return resp.sandbox

    async def destroy_sandbox(self, tenant: str, sandbox_id: str) -> None:
        """Destroy a sandbox: its commands, its container, a workspace the tool service made.

        Raises:
            MeshError: the tool service's error (NOT_FOUND/SANDBOX_NOT_FOUND when it is gone).
        """
        await self._call(
            "tools",
            lambda: self.client.tool_service.DestroySandbox(
                tpb.DestroySandboxRequest(sandbox_id=sandbox_id),
                metadata=meta(tenant),
                timeout=SANDBOX_CALL_TIMEOUT_S,
            ),
        )

    async def cancel_execution(
        self, tenant: str, run_id: str, call_id: str, attempt: int, reason: str
    ) -> tpb.CancelExecutionResponse:
        """Kill a call the tool service runs (or journal it never-started); see CancelExecution."""
        return await self._call(
            "tools",
            lambda: self.client.tool_service.CancelExecution(
                tpb.CancelExecutionRequest(
                    run_id=run_id, call_id=call_id, attempt=attempt, reason=reason[:256]
                ),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )

    async def execute(self, tenant: str, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse:
        """Execute one tool call (idempotent on run_id + call_id at the tool service).

        Raises:
            MeshError: the tool service's error.
        """
        timeout = (
            request.timeout.seconds + request.timeout.nanos / 1e9 if request.HasField("timeout") else 600.0
        )
        deadline = timeout + self._tool_grace_s
        answer = await streams.send(
            TOOLS, (request, False), timeout=deadline, ready=self._ready, on_resend=self._resent
        )
        if answer is not NOT_SENT:
            return answer  # type: ignore[no-any-return]
        return await self._call(
            "tools",
            lambda: self.client.tool_service.ExecuteTool(request, metadata=meta(tenant), timeout=deadline),
        )

    async def stream_execute(
        self,
        tenant: str,
        request: tpb.ExecuteToolRequest,
        on_progress: Callable[[tpb.ToolProgress], None],
    ) -> tpb.ExecuteToolResponse:
        """Execute one tool call through StreamExecuteTool, passing its output chunks on.

        Re-sending is safe: the tool service answers a repeated (run_id, call_id) from its
        journal or joins the call in flight, so a stream cut by a restart is sent again, up
        to STREAM_RESENDS times (a chunk may then be passed on twice; the result is the
        call's one result).

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
                metadata=meta(tenant),
                timeout=timeout + self._tool_grace_s,
            )
            result: tpb.ExecuteToolResponse | None = None
            try:
                # Read to the stream's end (the result is its last message): leaving after the
                # result would cancel a call whose OK status is still on its way.
                async for message in call:
                    if message.HasField("progress") and result is None:
                        on_progress(message.progress)
                    elif message.HasField("result") and result is None:
                        result = message.result
            finally:
                call.cancel()
            if result is not None:
                return result
            raise MeshError(
                Status.INTERNAL, Reason.INTERNAL, "the tool service's stream ended without a result"
            )

        answer = await streams.send(
            TOOLS,
            (request, True),
            timeout=timeout + self._tool_grace_s,
            ready=self._ready,
            on_event=on_progress,
            resends=STREAM_RESENDS,
            on_resend=self._resent,
        )
        if answer is not NOT_SENT:
            return answer  # type: ignore[no-any-return]
        # gRPC's retry policy re-sends this stream only until its first message; one cut
        # later (a tools replica killed mid-command) is re-sent here, to any replica.
        for _ in range(STREAM_RESENDS):
            await self._ready("tools")
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                if not transport_failure(err):
                    failed = from_rpc_error(err)
                    failed.peer = TOOLS
                    raise failed from err
                self.unavailable_waits += 1
        return await self._call("tools", send)
