"""Following a run from a client: StartRun, the live event stream, approvals, the outcome.

`follow_run()` is the client loop `agentrt run` and the demo share: StartRun, then
StreamRunEvents from seq 0, rendering each event (cli/render.py); when the stream breaks it
reconnects with the last seq it saw (the server replays the rest, or says what it lost as a
gap event). A suspension for approval is answered through ResumeRun with the decisions of
an `Approver`. The stream of a run ends with `stream_end`; the outcome is then read back
with GetRun, which is the record of truth.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from rich.console import Console
from rich.markup import escape

from agentrt.cli.render import RunRenderer, visible
from agentrt.client.channels import MeshClient
from agentrt.client.events import events_of
from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2, run_service_pb2

#: Times a broken event stream is reopened in a row before giving up.
MAX_RECONNECTS = 8
_RECONNECT_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)

#: Decides a pending call: returns (approved, message for the model when denied).
Approver = Callable[[common_pb2.ToolCall], Awaitable[tuple[bool, str]]]


@dataclass
class RunOutcome:
    """How a followed run ended.

    Attributes:
        run: the run's record from GetRun after its stream ended.
        events: every event received, in order (seq increasing; a gap event carries the seq it follows).
    """

    run: run_service_pb2.Run
    events: list[run_service_pb2.RunEvent]

    @property
    def completed(self) -> bool:
        """True when the run ended with status completed."""
        return self.run.status == common_pb2.RUN_STATUS_COMPLETED


async def _resume_request(
    run_id: str, suspended: run_service_pb2.RunSuspended, approver: Approver
) -> run_service_pb2.ResumeRunRequest:
    """Decide every pending call once (asking the approver) and return the ResumeRun request."""
    decisions, results = [], []
    for pending in suspended.pending_calls:
        if pending.kind == run_service_pb2.PENDING_CALL_KIND_EXTERNAL_RESULT:
            # The CLI declares no tools of its own, so it can only say it cannot answer.
            results.append(
                common_pb2.ToolResult(
                    call_id=pending.call.call_id,
                    name=pending.call.name,
                    content=f"the client cannot run the tool {pending.call.name}",
                    is_error=True,
                    status=common_pb2.TOOL_RESULT_STATUS_ERROR,
                )
            )
            continue
        approved, message = await approver(pending.call)
        decisions.append(
            run_service_pb2.ApprovalDecision(call_id=pending.call.call_id, approved=approved, message=message)
        )
    return run_service_pb2.ResumeRunRequest(run_id=run_id, decisions=decisions, results=results)


async def _send_resume(
    client: MeshClient, request: run_service_pb2.ResumeRunRequest, console: Console
) -> None:
    """Send ResumeRun; an answer that already landed (RUN_NOT_SUSPENDED) counts as sent.

    Raises:
        grpc.aio.AioRpcError: any other failure (the caller retries transient ones).
    """
    try:
        await client.run_service.ResumeRun(request)
    except grpc.aio.AioRpcError as exc:
        if reason_of(exc) != "RUN_NOT_SUSPENDED":
            raise
        console.print("[dim]· already resumed[/]")


async def follow_run(
    client: MeshClient,
    request: run_service_pb2.StartRunRequest,
    console: Console,
    approver: Approver,
    on_started: Callable[[run_service_pb2.StartRunResponse], None] | None = None,
) -> RunOutcome:
    """Start a run and render its events until its stream ends; return its outcome.

    Args:
        client: a MeshClient with the runs address.
        request: the StartRun request.
        console: where the live view goes.
        approver: decides calls waiting for approval.
        on_started: called with StartRun's answer before the stream is opened.

    Returns:
        The run record (GetRun) after `stream_end`, and the events as received: seq strictly
        increasing, except that gap events (004 §2.11) carry the seq they resume after.

    Raises:
        grpc.aio.AioRpcError: StartRun was refused, or the stream broke more than
            MAX_RECONNECTS times in a row.
    """
    started = await client.run_service.StartRun(request)
    if on_started is not None:
        on_started(started)
    renderer = RunRenderer(console)
    events: list[run_service_pb2.RunEvent] = []
    last_seq, failures, ended = 0, 0, False
    # A decided but undelivered resume: re-sent before the stream is reopened, so a
    # connection lost between the decision and ResumeRun cannot leave the run suspended.
    resume: run_service_pb2.ResumeRunRequest | None = None
    while not ended:
        try:
            if resume is not None:
                await _send_resume(client, resume, console)
                resume = None
            stream = client.run_service.StreamRunEvents(
                run_service_pb2.StreamRunEventsRequest(
                    run_id=started.run_id, after_seq=last_seq, batch_events=True
                )
            )
            async for message in stream:
                for event in events_of(message):
                    if event.HasField("gap"):
                        # A gap carries seq = its last_good, at or below our cursor; a last_good
                        # below the cursor is a reset of the timeline, which starts again after it.
                        renderer.show(event)
                        events.append(event)
                        last_seq = min(last_seq, event.gap.last_good)
                        continue
                    if event.seq <= last_seq:
                        continue  # a replay overlapping what we already have
                    last_seq, failures = event.seq, 0
                    events.append(event)
                    renderer.show(event)
                    if event.HasField("run_suspended"):
                        resume = await _resume_request(started.run_id, event.run_suspended, approver)
                        await _send_resume(client, resume, console)
                        resume = None
                    if event.HasField("stream_end"):
                        ended = True  # the server closes the stream next; reading on ends it with OK
            if not ended:
                failures += 1
                if failures > MAX_RECONNECTS:
                    raise RuntimeError(
                        f"the event stream of run {started.run_id} kept closing without its end"
                    )
        except grpc.aio.AioRpcError as exc:
            if ended:
                break  # the stream broke after its end: nothing of the run is missing
            failures += 1
            if exc.code() not in _RECONNECT_CODES or failures > MAX_RECONNECTS:
                raise
            what = "resume" if resume is not None else "event stream"
            console.print(f"[yellow]{what} failed ({exc.code().name}); retrying after seq {last_seq}[/]")
            await asyncio.sleep(min(0.2 * 2**failures, 5.0))  # backoff before reopening, not a wait for state
    return RunOutcome(run=await _final_record(client, started.run_id, events), events=events)


_TERMINAL = (common_pb2.RUN_STATUS_COMPLETED, common_pb2.RUN_STATUS_FAILED, common_pb2.RUN_STATUS_CANCELED)
#: Bound on waiting for the run record to show the terminal status its stream announced, in seconds.
FINAL_RECORD_SECONDS = 10.0


async def _final_record(
    client: MeshClient, run_id: str, events: list[run_service_pb2.RunEvent]
) -> run_service_pb2.Run:
    """Return GetRun's record once it is terminal; past the bound, the record patched from run_completed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FINAL_RECORD_SECONDS
    while True:
        run = (await client.run_service.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
        if run.status in _TERMINAL or loop.time() >= deadline:
            break
        await asyncio.sleep(0.05)  # polling a state with a bound
    done = next((e.run_completed for e in reversed(events) if e.HasField("run_completed")), None)
    if run.status not in _TERMINAL and done is not None:
        run.status, run.phase, run.final_output, run.turns = (
            done.status,
            done.phase,
            done.final_output,
            done.turns,
        )
        run.failure.CopyFrom(done.failure)
        run.usage.CopyFrom(done.usage)
    return run


def terminal_approver(console: Console, approve_all: bool, interactive: bool) -> Approver:
    """Return the approver of the command: approve all, ask on the TTY, or deny without one."""

    async def decide(call: common_pb2.ToolCall) -> tuple[bool, str]:
        name = escape(visible(call.name))
        if approve_all:
            console.print(f"[green]approved[/] {name} (--approve-all)")
            return True, ""
        if not interactive:
            console.print(f"[yellow]denied[/] {name}: no terminal to ask; rerun with --approve-all")
            return False, "denied: nobody was at a terminal to approve the call"
        # the arguments are the model's: shown exactly, never read as markup or control codes
        args = escape(visible(call.arguments or call.invalid_arguments))
        question = f"approve {name} {args}? \\[y/N] "
        answer = await asyncio.to_thread(console.input, question)
        if answer.strip().lower() in ("y", "yes"):
            return True, ""
        return False, "the user denied this call"

    return decide
