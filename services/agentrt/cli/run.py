"""`agentrt run "<task>"`: start a run through RunService and follow it live.

`follow_run()` is the client loop the command and the demo share: StartRun with an inline
tool-using agent, then StreamRunEvents from seq 0, rendering each event; when the stream
breaks it reconnects with the last seq it saw (the server replays the rest, or says what
it lost as a gap event). A suspension for approval is answered through ResumeRun with the
decisions of an `Approver`. The stream of a run ends with `stream_end`; the outcome is
then read back with GetRun, which is the record of truth.

With `--tasks` the agent also gets the four task tools and is registered (as `cli`, a new
version) so the background tasks it spawns run as it; the session's tasks are shown live
beside the run (cli/taskcards.py: a line at each spawn, a card at each ending), and the
command waits for the tasks still working when the run ends before it exits.

Exit status of the command: 0 when the run completed; 1 when it failed or was canceled
(the structured failure, kind and message, is printed); 2 for bad flags; 4 when the mesh
could not be reached or refused the request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from rich.console import Console
from rich.markup import escape

from agentrt.cli.args import read_task, task_text
from agentrt.cli.render import RunRenderer, status_name
from agentrt.cli.taskcards import TaskCards, stop_watching, watch_tasks
from agentrt.cli.tls import add_client_flags, client_security
from agentrt.client.channels import MeshClient
from agentrt.mesh.config import DEFAULT_PORTS, edge_from_env, env
from agentrt.mesh.context import DEFAULT_TENANT
from agentrt.mesh.security import TlsConfig
from agentrt.mesh.status import reason_of
from agentrt.tools.config import ToolsConfig
from agentrt.v1 import common_pb2, run_service_pb2

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 4

#: The tools of the CLI's inline agent (names in the tool service's catalog).
DEFAULT_TOOLS = ("exec_command", "read_file", "write_file", "list_files")
#: The task tools `--tasks` adds (004 §2.13; the tool service's catalog).
TASK_TOOLS = ("spawn_task", "task_status", "task_retry", "task_stop")

AGENT_INSTRUCTIONS = (
    "You are a careful agent that completes tasks inside a workspace directory by calling tools.\n"
    "Tools: exec_command runs a shell command in the workspace; read_file reads a file; write_file "
    "writes a file; list_files lists files. Paths are relative to the workspace.\n"
    "Call one tool at a time and read its result. As soon as a result shows the task is done, stop "
    "calling tools and reply with a short final answer."
)

#: Instructions for the local model. A 135M model follows a shown exchange far better than
#: rules, and small wording changes move it (measured on the demo task), so this text is
#: kept short, with one worked example in the reply format of the gateway's local provider.
LOCAL_MODEL_INSTRUCTIONS = (
    "You complete tasks in a workspace directory by calling tools, one call per reply. "
    "After a tool result that shows the task is done, reply with the final answer.\n"
    "Example:\nTask: create a.txt containing hi\n"
    'You: {"tool": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}\n'
    "Tool write_file returned: wrote 2 bytes to a.txt\n"
    'You: {"answer": "done"}'
)

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


def parse_model(spec: str) -> common_pb2.ModelRef:
    """Parse "PROVIDER:MODEL" (or "PROVIDER") into a ModelRef.

    Raises:
        ValueError: the provider part is empty.
    """
    provider, _, model = spec.partition(":")
    if not provider.strip():
        raise ValueError(f"--model {spec!r}: expected PROVIDER:MODEL, e.g. local or openai:gpt-4.1-mini")
    return common_pb2.ModelRef(provider=provider.strip(), model=model.strip())


def build_agent(model: common_pb2.ModelRef, max_turns: int) -> run_service_pb2.AgentSpec:
    """Return the CLI's inline agent: instructions for tool use, the four workspace tools, the limits.

    The local model gets LOCAL_MODEL_INSTRUCTIONS instead of AGENT_INSTRUCTIONS.
    """
    instructions = LOCAL_MODEL_INSTRUCTIONS if model.provider == "local" else AGENT_INSTRUCTIONS
    return run_service_pb2.AgentSpec(
        name="cli",
        instructions=instructions,
        model=model,
        tools=[run_service_pb2.AgentTool(name=name) for name in DEFAULT_TOOLS],
        limits=run_service_pb2.AgentLimits(max_turns=max_turns),
    )


def add_parser(subparsers: Any) -> None:
    """Register the `run` subcommand."""
    p = subparsers.add_parser(
        "run",
        help="run an agent on a task and watch it live",
        description="Start a run on the mesh (see `agentrt up`) and follow its events until it ends.",
    )
    p.add_argument(
        "task",
        type=task_text,
        help='what the agent should do; "-" reads it from standard input (UTF-8, for long tasks)',
    )
    p.add_argument(
        "--model",
        default=None,
        help="PROVIDER:MODEL, e.g. local, openai:gpt-4.1-mini, anthropic:claude-sonnet-5-5 "
        "(default AGENTRT_DEFAULT_MODEL or local)",
    )
    p.add_argument("--workspace", default=None, help="directory the tools work in (default: a fresh one)")
    p.add_argument("--session", default="", help="continue this session (default: a new one)")
    p.add_argument(
        "--runs-addr", default=None, help="RunService address (default AGENTRT_RUNS_ADDR or 127.0.0.1:50051)"
    )
    p.add_argument("--max-turns", type=int, default=10, help="turns before the run fails (default 10)")
    p.add_argument(
        "--approve-all", action="store_true", help="approve every tool call that asks for approval"
    )
    p.add_argument(
        "--tasks",
        action="store_true",
        help="give the agent the background-task tools and show its tasks live (registers it as `cli`)",
    )
    p.add_argument(
        "--tasks-addr",
        default=None,
        help="TaskService address (default AGENTRT_TASKS_ADDR or 127.0.0.1:50055)",
    )
    add_client_flags(p)
    p.set_defaults(func=run_command)


def terminal_approver(console: Console, approve_all: bool, interactive: bool) -> Approver:
    """Return the approver of the command: approve all, ask on the TTY, or deny without one."""

    async def decide(call: common_pb2.ToolCall) -> tuple[bool, str]:
        if approve_all:
            console.print(f"[green]approved[/] {escape(call.name)} (--approve-all)")
            return True, ""
        if not interactive:
            console.print(
                f"[yellow]denied[/] {escape(call.name)}: no terminal to ask; rerun with --approve-all"
            )
            return False, "denied: nobody was at a terminal to approve the call"
        question = f"approve {call.name} {call.arguments or call.invalid_arguments}? [y/N] "
        answer = await asyncio.to_thread(console.input, question)
        if answer.strip().lower() in ("y", "yes"):
            return True, ""
        return False, "the user denied this call"

    return decide


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
                run_service_pb2.StreamRunEventsRequest(run_id=started.run_id, after_seq=last_seq)
            )
            async for message in stream:
                event = message.event
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
                    ended = True
                    break
            if not ended:
                failures += 1
                if failures > MAX_RECONNECTS:
                    raise RuntimeError(
                        f"the event stream of run {started.run_id} kept closing without its end"
                    )
        except grpc.aio.AioRpcError as exc:
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


def print_outcome(console: Console, run: run_service_pb2.Run, default_workspace: str = "") -> None:
    """Print the ending: status, run id, session, workspace; the failure when failed.

    Args:
        console: where to print.
        run: the run's record.
        default_workspace: where the tool service put the files of a run with no workspace
            of its own (see `default_workspace`); "" to say nothing about it.
    """
    console.print(
        f"run {escape(run.run_id)} {status_name(run.status)} · session {escape(run.session_id)}"
        + (f" · workspace {escape(run.workspace)}" if run.workspace else "")
    )
    if not run.workspace and default_workspace:
        if os.path.isdir(default_workspace):
            console.print(f"workspace {escape(default_workspace)}", highlight=False, soft_wrap=True)
        else:
            # The tool service runs with other settings (another state dir or workspace root),
            # or no tool ran; say the rule rather than a path that may be wrong.
            console.print(
                f"workspace: made by the tool service at <workspace root>/{escape(_tenant())}/runs/"
                f"{escape(run.run_id)} (root: AGENTRT_WORKSPACE_ROOT, else <state-dir>/workspaces; "
                f"here that would be {escape(default_workspace)}, which does not exist)",
                highlight=False,
                soft_wrap=True,
            )
    if run.status == common_pb2.RUN_STATUS_FAILED:
        f = run.failure
        console.print(
            f"[bold red]failure[/] kind={escape(f.kind)} message={escape(f.message)}", highlight=False
        )


def _tenant() -> str:
    return env("TENANT", "") or DEFAULT_TENANT


def default_workspace(run_id: str) -> str:
    """Return where the tool service puts the files of a run started without a workspace.

    The rule is the tool service's (tools/sandbox/manager.py): `<root>/<tenant>/runs/<run_id>`,
    root = AGENTRT_WORKSPACE_ROOT or `<state-dir>/workspaces`. It is computed from this
    process's settings, which match those of an `agentrt up` started in the same directory
    with the same environment; "" when those settings do not parse.
    """
    try:
        root = ToolsConfig.from_env().resolved_workspace_root
    except ValueError:
        return ""
    return os.path.join(root, _tenant(), "runs", run_id)


def run_command(args: argparse.Namespace) -> int:
    """Run `agentrt run`; return the exit status (see the module docstring)."""
    console = Console()
    errors = Console(stderr=True)
    try:
        model = parse_model(args.model or env("DEFAULT_MODEL", "local"))
    except ValueError as exc:
        errors.print(f"agentrt run: {exc}")
        return EXIT_USAGE
    if args.max_turns < 1:
        errors.print("agentrt run: --max-turns must be at least 1")
        return EXIT_USAGE
    try:
        edge = edge_from_env()
        token, tls = client_security(args, edge["auth_token"], edge["tls"])
    except ValueError as exc:
        errors.print(f"agentrt run: {exc}")
        return EXIT_USAGE
    try:
        task = read_task(sys.stdin.buffer) if args.task == "-" else args.task
    except argparse.ArgumentTypeError as exc:
        errors.print(f"agentrt run: {exc}")
        return EXIT_USAGE
    workspace = ""
    if args.workspace:
        path = Path(args.workspace).expanduser().resolve()
        # Parents only: the tool service creates the directory itself, and as root it hands
        # only a directory it created to the sandbox user (docs/services/tools.md).
        path.parent.mkdir(parents=True, exist_ok=True)
        workspace = str(path)
    spec = build_agent(model, args.max_turns)
    if args.tasks:
        spec.tools.extend(run_service_pb2.AgentTool(name=name) for name in TASK_TOOLS)
    request = run_service_pb2.StartRunRequest(
        agent=spec,
        input=task,
        session_id=args.session,
        workspace=workspace,
    )
    runs_addr = args.runs_addr or env("RUNS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['runs']}")
    approver = terminal_approver(console, args.approve_all, sys.stdin.isatty() and sys.stdout.isatty())
    tasks_addr = ""
    if args.tasks:
        tasks_addr = args.tasks_addr or env("TASKS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['tasks']}")
    return asyncio.run(_run(runs_addr, request, console, errors, approver, token, tls, tasks_addr))


async def _run(
    runs_addr: str,
    request: run_service_pb2.StartRunRequest,
    console: Console,
    errors: Console,
    approver: Approver,
    token: str,
    tls: TlsConfig,
    tasks_addr: str = "",
) -> int:
    client = MeshClient(runs=runs_addr, tasks=tasks_addr, token=token, tenant=env("TENANT", ""), tls=tls)
    cards, watchers = TaskCards(console), []

    def watch(started: run_service_pb2.StartRunResponse) -> None:
        if tasks_addr:
            watchers.append(asyncio.create_task(watch_tasks(client, started.session_id, cards)))

    try:
        if tasks_addr:  # registered, so a task it spawns runs as it (tasks inherit a registered agent)
            registered = await client.run_service.RegisterAgent(
                run_service_pb2.RegisterAgentRequest(agent=request.agent)
            )
            request.agent_name, request.agent_version = registered.agent.name, registered.agent.version
            request.ClearField("agent")
        outcome = await follow_run(client, request, console, approver, on_started=watch)
        if watchers and cards.live:
            console.print(
                f"[magenta]waiting for {cards.live} background task(s) to end (Ctrl-C leaves them)[/]"
            )
            await cards.until_idle()
    except grpc.aio.AioRpcError as exc:
        reason = reason_of(exc)
        errors.print(
            f"[bold red]agentrt run:[/] {exc.code().name}"
            + (f" {reason}" if reason else "")
            + f": {escape(exc.details() or '')}",
            highlight=False,
        )
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            errors.print(f"is the mesh running? start it with `agentrt up` (RunService at {runs_addr})")
        return EXIT_UNREACHABLE
    except RuntimeError as exc:
        errors.print(f"[bold red]agentrt run:[/] {escape(str(exc))}")
        return EXIT_UNREACHABLE
    finally:
        for watcher in watchers:
            await stop_watching(watcher)
        await client.close()
    print_outcome(console, outcome.run, default_workspace(outcome.run.run_id))
    return 0 if outcome.completed else EXIT_FAILED


def workspace_listing(root: str | os.PathLike[str], limit: int = 50) -> list[str]:
    """Return "path (N bytes)" lines for the files under root, sorted, at most `limit`."""
    base = Path(root)
    files = sorted(p for p in base.rglob("*") if p.is_file())
    lines = [f"{p.relative_to(base)} ({p.stat().st_size} bytes)" for p in files[:limit]]
    if len(files) > limit:
        lines.append(f"… and {len(files) - limit} more")
    return lines
