"""The tool phase's execution: a turn's runnable calls through the tool service (004 §2.2 step 5, §2.7).

`execute_calls` runs the runnable calls concurrently up to the cap (one `sequential`
tool serializes the batch), and returns every result in call order, whatever the
completion order. A tool failure is a result with is_error. Every committed call gets
exactly one result, whatever happens:
- a call the tool service refused before running it (`failures.tool_refusal`: bad input, a
  lost sandbox, a workspace commands cannot write, ...) gets "The tool service refused this
  call: <why>" (NOT_EXECUTED, is_error): its outcome is known, it did not run. The model
  reads it, unless the refusal also ends the run (a workspace no tool can use, refused
  credentials): then it is an error of the run, reported for the lowest call index;
- a tool service that is down, or a failure after the call may have started, is an error of
  the run (lowest call index wins), and its call gets a result saying its outcome is unknown;
- a batch killed by a cancel or the time budget (`BatchStop.kill`) answers the calls not
  started ("not executed") and cancels the running ones at the tool service
  (CancelExecution; "cancelled while running: partial effects possible");
- a batch abandoned by this process (`BatchStop.abandon`: shutdown, lease lost) leaves the
  calls running in the tool service, which journals them; the next owner's repeat of the
  same (run id, call id, attempt) attaches to them and gets their real result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from agentrt.core.decide import Call
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.core.truncate import byte_len, text_prefix
from agentrt.mesh import telemetry
from agentrt.runs.convert.model import call_out
from agentrt.runs.loop.failures import RunFailed, ToolCallRefused, failure_of, tool_refusal
from agentrt.runs.loop.phases.results import (
    BatchResult,
    cancelled_result,
    not_executed_result,
    refused_result,
    unknown_outcome_result,
)
from agentrt.runs.loop.phases.tools import Planned
from agentrt.runs.observe import record_tool_result
from agentrt.runs.peers.client import Peers
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import tool_service_pb2 as tpb

#: Waits between re-sends of a call another process is still running (a takeover), seconds.
IN_PROGRESS_BACKOFF_S = (0.2, 0.5, 1.0, 2.0)
#: How long past a call's own timeout a repeat keeps waiting for the run elsewhere, seconds.
IN_PROGRESS_SLACK_S = 60.0
#: The timeout assumed for a call whose tool states none, seconds (the tool service's ceiling).
DEFAULT_CALL_TIMEOUT_S = 600.0
#: Output of one call passed on as tool_progressed events, in bytes of UTF-8, the closing
#: marker included (cut on a character boundary); the result keeps the (capped) whole
#: either way, so a flood does not flood the run's event log.
MAX_PROGRESS_BYTES = 64 * 1024
_PROGRESS_MARK = "\n[... further output is in the result only ...]\n"

ProgressSink = Callable[[str, str, str], None]
#: One call's chunk sink (`_progress_relay`: capped at MAX_PROGRESS_BYTES).
ProgressRelay = Callable[[tpb.ToolProgress], None]


async def _execute(
    peers: Peers,
    tenant: str,
    request: tpb.ExecuteToolRequest,
    on_progress: Callable[[tpb.ToolProgress], None] | None = None,
) -> cpb.ToolResult:
    """ExecuteTool, re-sent while the tool service says the call still runs elsewhere.

    With on_progress, StreamExecuteTool is used and each output chunk is passed on. After a
    takeover the dead replica's call may still be running in the tool service; the journal
    answers ABORTED/EXECUTION_IN_PROGRESS until it ends, then the recorded result; the
    repeat waits as long as the call may run (its timeout) and a minute more.
    """
    timeout = request.timeout.ToNanoseconds() / 1e9 if request.HasField("timeout") else DEFAULT_CALL_TIMEOUT_S
    deadline = time.monotonic() + timeout + IN_PROGRESS_SLACK_S
    attempt = 0
    while True:
        try:
            if on_progress is None:
                return (await peers.execute(tenant, request)).result
            return (await peers.stream_execute(tenant, request, on_progress)).result
        except MeshError as err:
            if (
                time.monotonic() >= deadline
                or err.status != Status.ABORTED
                or err.reason != Reason.EXECUTION_IN_PROGRESS
            ):
                raise
            await asyncio.sleep(IN_PROGRESS_BACKOFF_S[min(attempt, len(IN_PROGRESS_BACKOFF_S) - 1)])
            attempt += 1


#: ExecuteTool refusals saying the run's sandbox is gone or stopped (nothing ran).
SANDBOX_LOST = (Reason.SANDBOX_NOT_FOUND, Reason.SANDBOX_STOPPED)


async def _execute_regaining(
    peers: Peers,
    tenant: str,
    request: tpb.ExecuteToolRequest,
    on_progress: Callable[[tpb.ToolProgress], None] | None,
    regain: Callable[[], Awaitable[None]] | None,
) -> cpb.ToolResult:
    """`_execute`, regaining a lost sandbox once; a refusal raised as `ToolCallRefused`.

    When the run's sandbox was stopped or destroyed behind its back (the call was refused,
    nothing ran), `regain` creates or resumes it, then the call is sent once more.

    Raises:
        ToolCallRefused: the tool service refused the call before running it
            (`failures.tool_refusal`), or its lost sandbox could not be had again.
        MeshError: any other error of the tool service: the call's outcome is unknown.
    """
    try:
        try:
            return await _execute(peers, tenant, request, on_progress)
        except MeshError as err:
            if regain is None or not request.sandbox_id or err.reason not in SANDBOX_LOST:
                raise
            lost = err
        try:
            await regain()
        except RunFailed as failed:
            raise ToolCallRefused(f"{lost.message}; {failed.failure.message}", failed.failure) from failed
        except MeshError as err:
            again = f"{lost.message}; it could not be had again: {err.message}"
            raise ToolCallRefused(again, failure_of(err)) from err
        return await _execute(peers, tenant, request, on_progress)
    except MeshError as err:
        refused = tool_refusal(err)
        if refused is None:
            raise
        raise refused from err


def _progress_relay(call_id: str, sink: ProgressSink) -> Callable[[tpb.ToolProgress], None]:
    """Pass a call's chunks to sink until MAX_PROGRESS_BYTES (marker included), then nothing."""
    left = MAX_PROGRESS_BYTES - byte_len(_PROGRESS_MARK)

    def relay(progress: tpb.ToolProgress) -> None:
        nonlocal left
        if left < 0:
            return
        text = text_prefix(progress.text, left)
        left -= byte_len(text)
        if text != progress.text:
            text += _PROGRESS_MARK
            left = -1
        if text:
            sink(call_id, progress.stream, text)

    return relay


class BatchStop:
    """How the loop stops a batch of calls in flight.

    `kill(why)`: the run is cancelled or out of time; calls not started are answered "not
    executed", running ones are cancelled at the tool service (CancelExecution) and answered
    "cancelled while running", so every committed call gets exactly one result.
    `abandon()`: this process lets go (shutdown, lease lost); the calls run on in the tool
    service, journaled, and the next owner's repeat attaches to them.
    """

    def __init__(self) -> None:
        """Nothing is stopped yet."""
        self.mode = ""
        self.why = ""
        self._event = asyncio.Event()

    def kill(self, why: str) -> None:
        """Stop the batch and kill what runs (see the class docstring)."""
        if not self.mode:
            self.mode, self.why = "kill", why
            self._event.set()

    def abandon(self) -> None:
        """Stop waiting for the batch; the calls run on (see the class docstring)."""
        if not self.mode:
            self.mode = "abandon"
            self._event.set()

    async def wait(self) -> None:
        """Return once the batch was told to stop."""
        await self._event.wait()


class ChildRunner(Protocol):
    """Runs the batch's agent-tool calls as child runs (runs/loop/phases/child.py ChildCalls)."""

    def handles(self, call_id: str) -> bool:
        """True when the call is an agent tool's."""

    def withholds(self, call_id: str) -> bool:
        """True when the call's output is withheld (its child suspended): no on_result."""

    async def run(self, p: Planned, stop: BatchStop, relay: ProgressRelay | None) -> cpb.ToolResult:
        """Return the call's result once its child ended (or a placeholder when it suspended)."""


class Abandoned(Exception):
    """The batch was abandoned (BatchStop.abandon): nothing more is known here."""


#: How long a killed call may take to report its ending before the runtime answers it, seconds.
KILL_WAIT_S = 10.0


async def execute_calls(
    planned: Sequence[Planned],
    *,
    peers: Peers,
    tenant: str,
    run_id: str,
    workspace: str,
    concurrency: int,
    sandbox_id: str = "",
    regain_sandbox: Callable[[], Awaitable[None]] | None = None,
    on_result: Callable[[cpb.ToolResult], None],
    on_progress: ProgressSink | None = None,
    stop: BatchStop | None = None,
    attempts: Mapping[str, int] | None = None,
    on_queue_wait: Callable[[float], None] | None = None,
    children: ChildRunner | None = None,
) -> BatchResult:
    """Run the runnable calls; return all results in call order (004 §2.2 step 5).

    Args:
        planned: the plan; answered calls are returned as they are.
        peers: the tool service.
        tenant: the run's tenant.
        run_id: the run (with the call id and attempt, the tool service's idempotency key).
        workspace: absolute directory the calls run in; "" = the tool service's default.
        concurrency: calls executing at once (>= 1).
        sandbox_id: the run's sandbox the calls run in ("" = none; then `workspace` is "").
        regain_sandbox: creates or resumes that sandbox when a call finds it gone or stopped
            (SANDBOX_NOT_FOUND, SANDBOX_STOPPED); the call is then sent once more.
        on_result: called with each result as it completes (for live events).
        on_progress: called with (call_id, stream, text) for output chunks of calls that
            change things (read-only calls finish quickly and stream nothing), at most
            MAX_PROGRESS_BYTES per call (004 §2.7g).
        stop: lets the caller kill or abandon the batch (BatchStop).
        attempts: execution attempt per call id (0 when absent; a reconciliation's re-run).
        on_queue_wait: called with each call's wait for the concurrency cap, in seconds.
        children: runs the agent-tool calls (child runs, 004 §2.8) instead of the tool service.

    Each runnable call is one tool call span ("execute_tool <tool>", mesh/telemetry), the
    parent of its ExecuteTool RPC.

    Returns:
        A BatchResult: every planned call has exactly one result, also when the batch was
        killed, a call was refused (its result says so; `failure` is set when the refusal
        ends the run) or a call failed in the infrastructure (then `failure` is set and
        that call's result says its outcome is unknown).

    Raises:
        Abandoned: the batch was abandoned; the calls run on in the tool service.
    """
    stop = stop or BatchStop()
    attempts = attempts or {}
    if any(p.runs and p.spec is not None and p.spec.sequential for p in planned):
        concurrency = 1
    gate = asyncio.Semaphore(max(1, concurrency))

    async def run_one(p: Planned) -> cpb.ToolResult:
        attempt = attempts.get(p.call.call_id, 0)
        request = tpb.ExecuteToolRequest(
            run_id=run_id, call=call_out(p.call), workspace=workspace, sandbox_id=sandbox_id, attempt=attempt
        )
        if p.spec is not None and p.spec.HasField("timeout"):
            request.timeout.CopyFrom(p.spec.timeout)
        if p.policy is not None:
            request.command_policy.CopyFrom(p.policy)
        queued = time.monotonic()
        async with gate:
            if on_queue_wait is not None:
                on_queue_wait(time.monotonic() - queued)
            if stop.mode == "abandon":
                raise Abandoned()
            if stop.mode == "kill":
                result = not_executed_result(p.call, stop.why)
                on_result(result)
                return result
            relay = None
            if on_progress is not None and p.spec is not None and not p.spec.read_only:
                relay = _progress_relay(p.call.call_id, on_progress)
            if children is not None and children.handles(p.call.call_id):
                result = await children.run(p, stop, relay)
                result.call_id, result.name = p.call.call_id, p.call.name
                if not children.withholds(p.call.call_id):
                    on_result(result)
                return result
            call = asyncio.ensure_future(_execute_regaining(peers, tenant, request, relay, regain_sandbox))
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({call, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
            if not call.done():
                if stop.mode == "abandon":
                    call.cancel()
                    raise Abandoned()
                result = await _kill(peers, tenant, run_id, p.call, attempt, stop.why, call)
            else:
                try:
                    result = call.result()
                except ToolCallRefused as refused:
                    if refused.failure is not None:
                        raise  # it ends the run: answered below, with the batch's failure
                    result = refused_result(p.call, refused)
        result.call_id, result.name = p.call.call_id, p.call.name
        on_result(result)
        return result

    async def traced(p: Planned) -> cpb.ToolResult:
        with telemetry.tool_call_span(p.call.name, p.call.call_id) as span:
            span.set_content("gen_ai.tool.call.arguments", p.call.arguments)
            result = await run_one(p)
            record_tool_result(span, result)
            return result

    tasks = {i: asyncio.ensure_future(traced(p)) for i, p in enumerate(planned) if p.runs}
    try:
        if tasks:
            await asyncio.wait(tasks.values())
    finally:
        for task in tasks.values():
            task.cancel()
    if stop.mode == "abandon":
        raise Abandoned()
    out: list[cpb.ToolResult] = []
    failure: BaseException | None = None
    for i, p in enumerate(planned):
        if i in tasks:
            error = None if tasks[i].cancelled() else tasks[i].exception()
            if error is None and not tasks[i].cancelled():
                out.append(tasks[i].result())
                continue
            if isinstance(error, ToolCallRefused) and error.failure is not None:
                failure = failure or RunFailed(error.failure)
                result = refused_result(p.call, error)
            else:
                failure = failure or error or Abandoned()
                result = unknown_outcome_result(p.call, error or Abandoned())
            on_result(result)
            out.append(result)
        else:
            assert p.result is not None
            on_result(p.result)
            out.append(p.result)
    return BatchResult(out, failure, stop.why if stop.mode == "kill" else "")


async def _kill(
    peers: Peers,
    tenant: str,
    run_id: str,
    call: Call,
    attempt: int,
    why: str,
    running: asyncio.Future[cpb.ToolResult],
) -> cpb.ToolResult:
    """Cancel a running call at the tool service and return its "cancelled while running" result."""
    journaled: cpb.ToolResult | None = None
    try:
        resp = await peers.cancel_execution(tenant, run_id, call.call_id, attempt, why)
        if resp.HasField("result"):
            journaled = resp.result
    except MeshError:
        pass  # the tool service is unreachable: the runtime answers the call itself
    try:
        journaled = await asyncio.wait_for(asyncio.shield(running), KILL_WAIT_S)
    except (MeshError, TimeoutError):
        running.cancel()
    return cancelled_result(call, why, journaled)
