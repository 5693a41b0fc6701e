"""ToolService servicer: proto <-> domain (tools/convert.py) and nothing else.

Every method reads the tenant from the call context, hands domain objects to the
executor or the sandbox manager, and maps the answer back. Domain MeshErrors become gRPC
statuses in the mesh interceptor. The caller's deadline is passed down so that the
sandbox can tell its own timeout from the caller's ending (004 §2.7m).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator

import grpc

from agentrt.core.errors import Reason, invalid, missing
from agentrt.core.policy import SERVICE, compile_policy
from agentrt.mesh.calls import CallContext, CallsMethod, serve_calls
from agentrt.mesh.context import current_tenant
from agentrt.tools.archive.transfer import WorkspaceArchives
from agentrt.tools.calls.catalog import builtin
from agentrt.tools.convert import (
    BACKEND_IN,
    EXECUTION_STATE,
    execute_input,
    sandbox_message,
    tool_result,
    tool_spec,
    workspace_target,
)
from agentrt.tools.execution.executor import ToolExecutor
from agentrt.tools.sandbox.manager import SandboxManager
from agentrt.tools.sandbox.spec import SandboxSpec
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

log = logging.getLogger("agentrt.tools")


def _deadline(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return asyncio.get_running_loop().time() + remaining


class ToolServicer(pb_grpc.ToolServiceServicer):
    """ToolService over the executor and the sandbox manager."""

    def __init__(self, executor: ToolExecutor, sandboxes: SandboxManager) -> None:
        """Serve the given domain objects; compile the service's own command policy (004 §2.7j).

        A service pattern that does not compile is not fatal: the policy then refuses every
        command (fail closed), and this is logged and printed loudly once, here, at startup.
        """
        self._exec = executor
        self._sandboxes = sandboxes
        config = executor.config
        self._policy = compile_policy(config.policy_allow, config.policy_deny, origin=SERVICE)
        if self._policy.broken is not None:
            text = (
                f"agentrt tools: the service command policy does not compile ({self._policy.broken}); "
                "exec_command will REFUSE EVERY COMMAND until AGENTRT_TOOLS_POLICY_ALLOW/DENY is fixed"
            )
            print(f"!!! {text} !!!", file=sys.stderr, flush=True)
            log.error(text)
        self._archives = WorkspaceArchives(sandboxes, config.max_archive_bytes)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolsResponse:
        """Return the built-in catalog with JSON Schemas and capability fields (004 §2.7c).

        exec_command's schema has `session_id` only when named shells are enabled (§2.7k).
        """
        return pb.ListToolsResponse(tools=[tool_spec(t) for t in builtin(self._exec.config.shells)])

    async def ExecuteTool(
        self, request: pb.ExecuteToolRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExecuteToolResponse:
        """Run one call, or answer it from the journal (replayed), or attach to it while it runs.

        A caller that goes away leaves the call running to its end (journaled); only the
        caller's deadline or CancelExecution kills it.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD (run_id, call.call_id, call.name), INVALID_ID,
                UNKNOWN_TOOL, INVALID_VALUE (workspace, timeout, attempt outside 0..1000, a
                command_policy pattern that does not compile), CALL_ID_REUSED.
            NOT_FOUND: SANDBOX_NOT_FOUND.
            FAILED_PRECONDITION: SANDBOX_UNAVAILABLE (isolation probe failed), SANDBOX_STOPPED,
                WORKSPACE_NOT_WRITABLE (exec_command in a root-owned directory the service did
                not create).
            ABORTED: EXECUTION_IN_PROGRESS (running in another process; RetryInfo set).
            DEADLINE_EXCEEDED / CANCELLED: the caller's own ending (recorded INTERRUPTED).
        """
        inp = execute_input(request, self._policy)
        outcome, replayed = await self._exec.execute(current_tenant(), inp, deadline=_deadline(context))
        return pb.ExecuteToolResponse(
            result=tool_result(inp.call.call_id, inp.call.name, outcome), replayed=replayed
        )

    async def StreamExecuteTool(
        self, request: pb.StreamExecuteToolRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamExecuteToolResponse]:
        """Stream output chunks as progress, then the result last (004 §2.7g); errors as ExecuteTool.

        The stream is: zero or more `progress` messages in arrival order, then exactly one
        `result`, then the end. A replayed call streams only its result.
        """
        inp = execute_input(request.request, self._policy)
        # Chunks, then None once the call has an answer: the handler awaits the queue itself,
        # so no helper task is left pending when the caller goes away (a per-chunk getter
        # task was, and was later garbage-collected: "Task was destroyed but it is pending!").
        queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        task = asyncio.create_task(
            self._exec.execute(
                current_tenant(), inp, deadline=_deadline(context), emit=lambda s, t: queue.put_nowait((s, t))
            )
        )
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (chunk := await queue.get()) is not None:
                stream, text = chunk
                yield pb.StreamExecuteToolResponse(progress=pb.ToolProgress(stream=stream, text=text))
            outcome, replayed = task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        result = tool_result(inp.call.call_id, inp.call.name, outcome)
        yield pb.StreamExecuteToolResponse(result=pb.ExecuteToolResponse(result=result, replayed=replayed))

    async def ExecuteToolCalls(
        self, requests: AsyncIterator[pb.ExecuteToolCallsRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ExecuteToolCallsResponse]:
        """Serve ExecuteTool calls over one stream (mesh/calls.py; the run loop keeps one per run).

        Each call is answered exactly as ExecuteTool answers it, preceded by its output
        chunks when it asked for progress (as StreamExecuteTool); errors as CallError.
        """
        async for response in serve_calls(requests, context, self.execute_calls()):
            yield response

    def execute_calls(self) -> CallsMethod:
        """ExecuteTool as a stream of calls' method (mesh/calls.py; mesh/local_calls.py in one process)."""

        async def handle(call: pb.ExecuteToolCallsRequest, ctx: CallContext) -> AsyncIterator[object]:
            if not call.progress:
                yield await self.ExecuteTool(call.request, ctx)  # type: ignore[arg-type]
                return
            streamed = pb.StreamExecuteToolRequest(request=call.request)
            async for message in self.StreamExecuteTool(streamed, ctx):  # type: ignore[arg-type]
                yield message.progress if message.HasField("progress") else message.result

        def answer(call_id: int, message: object) -> pb.ExecuteToolCallsResponse:
            if isinstance(message, pb.ToolProgress):
                return pb.ExecuteToolCallsResponse(call_id=call_id, progress=message)
            return pb.ExecuteToolCallsResponse(call_id=call_id, result=message)  # type: ignore[arg-type]

        return CallsMethod(
            "agentrt.v1.ToolService",
            "ExecuteTool",
            handle,
            answer,
            lambda call_id, error: pb.ExecuteToolCallsResponse(call_id=call_id, error=error),
        )

    async def GetExecution(
        self, request: pb.GetExecutionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetExecutionResponse:
        """Read a call's journal record (ABSENT / STARTED / FINISHED with its result).

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD or INVALID_ID for run_id / call_id; INVALID_VALUE
                for an attempt outside 0..1000.
        """
        state, outcome = await self._exec.get_execution(
            current_tenant(), request.run_id, request.call_id, request.attempt
        )
        resp = pb.GetExecutionResponse(state=EXECUTION_STATE[state])
        if outcome is not None:
            resp.result.CopyFrom(tool_result(request.call_id, "", outcome))
        return resp

    async def CancelExecution(
        self, request: pb.CancelExecutionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelExecutionResponse:
        """Kill a running call (journaled INTERRUPTED), or journal one not started as NOT_EXECUTED.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD or INVALID_ID for run_id / call_id; INVALID_VALUE
                for an attempt outside 0..1000.
        """
        state, outcome = await self._exec.cancel_execution(
            current_tenant(), request.run_id, request.call_id, request.attempt, request.reason
        )
        resp = pb.CancelExecutionResponse(state=EXECUTION_STATE[state])
        if outcome is not None:
            resp.result.CopyFrom(tool_result(request.call_id, "", outcome))
        return resp

    async def CreateSandbox(
        self, request: pb.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateSandboxResponse:
        """Create, adopt (same fingerprint) or replace a local sandbox; it is running after.

        Raises:
            INVALID_ARGUMENT: INVALID_ID, INVALID_VALUE (workspace, env, limits),
                UNSUPPORTED_CAPABILITY (image/user/network on the local backend).
            FAILED_PRECONDITION: SANDBOX_UNAVAILABLE for the docker backend.
        """
        limits = request.limits
        spec = SandboxSpec(
            sandbox_id=request.sandbox_id,
            backend=BACKEND_IN.get(int(request.backend), "?"),
            workspace=request.workspace,
            image=request.image,
            env=dict(request.env),
            user=request.user,
            network=request.network,
            cpu_seconds=limits.cpu_seconds,
            memory_bytes=limits.memory_bytes,
            file_size_bytes=limits.file_size_bytes,
            open_files=limits.open_files,
        )
        info = await self._sandboxes.create(current_tenant(), spec)
        return pb.CreateSandboxResponse(sandbox=sandbox_message(info))

    async def GetSandbox(
        self, request: pb.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSandboxResponse:
        """Report a sandbox; state ABSENT when unknown.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD or INVALID_ID for sandbox_id.
        """
        if not request.sandbox_id:
            raise missing("sandbox_id")
        return pb.GetSandboxResponse(
            sandbox=sandbox_message(await self._sandboxes.get(current_tenant(), request.sandbox_id))
        )

    async def StopSandbox(
        self, request: pb.StopSandboxRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopSandboxResponse:
        """Stop a sandbox: its running commands are killed, its files kept (004 §2.7p).

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD or INVALID_ID. NOT_FOUND: SANDBOX_NOT_FOUND.
        """
        if not request.sandbox_id:
            raise missing("sandbox_id")
        return pb.StopSandboxResponse(
            sandbox=sandbox_message(await self._sandboxes.stop(current_tenant(), request.sandbox_id))
        )

    async def DestroySandbox(
        self, request: pb.DestroySandboxRequest, context: grpc.aio.ServicerContext
    ) -> pb.DestroySandboxResponse:
        """Destroy a sandbox and the workspace the service made for it.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD or INVALID_ID. NOT_FOUND: SANDBOX_NOT_FOUND.
        """
        if not request.sandbox_id:
            raise missing("sandbox_id")
        await self._sandboxes.destroy(current_tenant(), request.sandbox_id)
        return pb.DestroySandboxResponse()

    async def UploadWorkspace(
        self, request_iterator: AsyncIterator[pb.UploadWorkspaceRequest], context: grpc.aio.ServicerContext
    ) -> pb.UploadWorkspaceResponse:
        """Unpack a tar (plain or gzip) sent in chunks of at most 1 MiB into a workspace directory.

        The first message carries the target (and may carry data); later ones data only.
        Answers the regular files and bytes of content written. Members before a refused
        one stay written; nothing is ever written outside the workspace.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD (no target in the first message), INVALID_ID,
                INVALID_VALUE (workspace, path, a target in a later message, a member that
                would replace a directory), MALFORMED_ARCHIVE, PATH_OUTSIDE_WORKSPACE,
                REQUEST_TOO_LARGE (a chunk over 1 MiB; the archive or its content over
                `max_archive_bytes`).
            NOT_FOUND: SANDBOX_NOT_FOUND. FAILED_PRECONDITION: SANDBOX_STOPPED.
        """
        it = request_iterator.__aiter__()
        first = await anext(it, None)
        if first is None or not first.HasField("target"):
            raise missing("target")

        async def chunks() -> AsyncIterator[bytes]:
            yield first.data
            async for message in it:
                if message.HasField("target"):
                    raise invalid(
                        Reason.INVALID_VALUE, "target is set in the first message only", field="target"
                    )
                yield message.data

        done = await self._archives.upload(current_tenant(), workspace_target(first.target), chunks())
        return pb.UploadWorkspaceResponse(files=done.files, bytes=done.bytes)

    async def DownloadWorkspace(
        self, request: pb.DownloadWorkspaceRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadWorkspaceResponse]:
        """Stream a tar (gzip when asked) of a workspace directory, in chunks of at most 1 MiB.

        The stream ends after the archive's last chunk. Symlinks are stored as links, never
        followed; FIFOs, sockets and devices are left out. Nothing is created.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD (target), INVALID_ID, INVALID_VALUE (workspace;
                path not a directory), PATH_OUTSIDE_WORKSPACE.
            NOT_FOUND: SANDBOX_NOT_FOUND, WORKSPACE_NOT_FOUND (the workspace or path does not
                exist). FAILED_PRECONDITION: SANDBOX_STOPPED.
        """
        if not request.HasField("target"):
            raise missing("target")
        async for chunk in self._archives.download(
            current_tenant(), workspace_target(request.target), gzip=request.gzip
        ):
            yield pb.DownloadWorkspaceResponse(data=chunk)
