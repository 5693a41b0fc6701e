"""`agentrt run "<task>"`: start a run through RunService and follow it live.

The command builds the request (an inline tool-using agent, or a registered one with
`--agent`; a sandbox with `--sandbox`), then follows the run with `follow_run()`
(cli/follow.py), which renders each event as it arrives (cli/render.py).

With `--tasks` the inline agent also gets the four task tools and is registered (as `cli`, a new
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
from pathlib import Path
from typing import Any

import grpc
from rich.console import Console
from rich.markup import escape

from agentrt.cli.args import read_task, task_text
from agentrt.cli.follow import Approver, RunOutcome, follow_run, terminal_approver
from agentrt.cli.render import status_name, visible
from agentrt.cli.taskcards import TaskCards, stop_watching, watch_tasks
from agentrt.cli.tls import add_client_flags, client_security
from agentrt.client.channels import MeshClient
from agentrt.mesh.config import DEFAULT_PORTS, edge_from_env, env
from agentrt.mesh.context import DEFAULT_TENANT
from agentrt.mesh.security import TlsConfig
from agentrt.mesh.status import reason_of
from agentrt.tools.config import ToolsConfig
from agentrt.v1 import common_pb2, run_service_pb2
from agentrt.v1 import tool_service_pb2 as tool_pb

__all__ = [
    "Approver",
    "RunOutcome",
    "build_agent",
    "follow_run",
    "parse_model",
    "parse_sandbox",
    "print_outcome",
    "terminal_approver",
    "workspace_listing",
]

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


def parse_sandbox(spec: str, env_pairs: list[str], network: str) -> run_service_pb2.RunSandbox | None:
    """Parse `--sandbox local|docker[:IMAGE]`, `--sandbox-env`, `--sandbox-network` (None: no sandbox).

    The server checks the rest (names, sizes, images) as CreateSandbox does.

    Raises:
        ValueError: an unknown backend, a NAME=VALUE without "=", or env/network without --sandbox.
    """
    if not spec:
        if env_pairs or network:
            raise ValueError("--sandbox-env and --sandbox-network need --sandbox")
        return None
    backend, _, image = spec.partition(":")
    backends = {"local": tool_pb.SANDBOX_BACKEND_LOCAL, "docker": tool_pb.SANDBOX_BACKEND_DOCKER}
    if backend not in backends:
        raise ValueError(f"--sandbox {spec!r}: expected local or docker[:IMAGE]")
    box = run_service_pb2.RunSandbox(backend=backends[backend], image=image, network=network)  # type: ignore[arg-type]
    for pair in env_pairs:
        name, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"--sandbox-env {pair!r}: expected NAME=VALUE")
        box.env[name] = value
    return box


def parse_agent_ref(ref: str) -> tuple[str, int]:
    """Parse `--agent NAME[:VERSION]` into (name, version; 0 = the latest).

    Raises:
        ValueError: an empty name or a version that is not a positive integer.
    """
    name, _, version = ref.partition(":")
    if not name or (version and (not version.isdigit() or int(version) < 1)):
        raise ValueError(f"--agent {ref!r}: expected NAME or NAME:VERSION (VERSION >= 1)")
    return name, int(version or 0)


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
    p.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="turns before the run fails (default 10; inline agent only)",
    )
    p.add_argument(
        "--agent",
        default="",
        metavar="NAME[:VERSION]",
        help="run this registered agent (its model, tools, handoffs) instead of the inline one",
    )
    p.add_argument(
        "--sandbox",
        default="",
        metavar="local|docker[:IMAGE]",
        help="run the agent's commands in a sandbox of their own, released when the run ends",
    )
    p.add_argument(
        "--sandbox-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of every command in the sandbox (repeatable; needs --sandbox)",
    )
    p.add_argument(
        "--sandbox-network", default="", metavar="NAME", help="docker network to join (default: none)"
    )
    p.add_argument(
        "--approve-all", action="store_true", help="approve every tool call that asks for approval"
    )
    p.add_argument(
        "--needs-approval",
        action="append",
        default=[],
        metavar="TOOL",
        help="the inline agent's TOOL asks for approval before each call (repeatable)",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="start the run, print its id and session, and exit (follow it with `agentrt runs show`)",
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
    if run.sandbox_id:
        console.print(
            f"sandbox {escape(run.sandbox_id)} (released when the run ended)", highlight=False, soft_wrap=True
        )
    elif not run.workspace and default_workspace:
        if os.path.isdir(default_workspace):
            console.print(f"workspace {escape(default_workspace)}", highlight=False, soft_wrap=True)
        else:
            # The tool service runs with other settings (another state dir or workspace root),
            # or no tool ran; say the rule rather than a path that may be wrong.
            # Words wrap at the terminal's width; the path stays one line, to be copied whole.
            console.print(
                f"workspace: made by the tool service at <workspace root>/{escape(_tenant())}/runs/"
                f"{escape(run.run_id)} (root: AGENTRT_WORKSPACE_ROOT, else <state-dir>/workspaces); "
                "here that would be this directory, which does not exist:",
                highlight=False,
            )
            console.print(escape(default_workspace), highlight=False, soft_wrap=True)
    if run.status == common_pb2.RUN_STATUS_FAILED:
        f = run.failure
        console.print(
            f"[bold red]failure[/] kind={escape(f.kind)} message={escape(visible(f.message))}",
            highlight=False,
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
        sandbox = parse_sandbox(args.sandbox, args.sandbox_env, args.sandbox_network)
        agent_ref = parse_agent_ref(args.agent) if args.agent else None
    except ValueError as exc:
        errors.print(f"agentrt run: {exc}")
        return EXIT_USAGE
    if agent_ref is not None and (args.model or args.max_turns is not None):
        errors.print(
            "agentrt run: --model and --max-turns are for the inline agent; --agent runs a registered one"
        )
        return EXIT_USAGE
    unknown = sorted(
        set(args.needs_approval) - set(DEFAULT_TOOLS) - (set(TASK_TOOLS) if args.tasks else set())
    )
    if agent_ref is not None and args.needs_approval:
        errors.print("agentrt run: --needs-approval is for the inline agent; --agent runs a registered one")
        return EXIT_USAGE
    if unknown:
        errors.print(f"agentrt run: --needs-approval {unknown[0]}: not a tool of the inline agent")
        return EXIT_USAGE
    max_turns = 10 if args.max_turns is None else args.max_turns
    if max_turns < 1:
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
    request = run_service_pb2.StartRunRequest(input=task, session_id=args.session, workspace=workspace)
    if sandbox is not None:
        request.sandbox.CopyFrom(sandbox)
    if agent_ref is not None:
        request.agent_name, request.agent_version = agent_ref
    else:
        request.agent.CopyFrom(build_agent(model, max_turns))
        if args.tasks:
            request.agent.tools.extend(run_service_pb2.AgentTool(name=name) for name in TASK_TOOLS)
        for tool in request.agent.tools:
            if tool.name in args.needs_approval:
                tool.needs_approval = True
    runs_addr = args.runs_addr or env("RUNS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['runs']}")
    approver = terminal_approver(console, args.approve_all, sys.stdin.isatty() and sys.stdout.isatty())
    tasks_addr = ""
    if args.tasks:
        tasks_addr = args.tasks_addr or env("TASKS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['tasks']}")
    if args.detach:
        return asyncio.run(_start_detached(runs_addr, request, console, errors, token, tls))
    return asyncio.run(_run(runs_addr, request, console, errors, approver, token, tls, tasks_addr))


def _print_refusal(errors: Console, exc: grpc.aio.AioRpcError) -> None:
    """Print a failed RPC as `agentrt run: CODE REASON: details` (details escaped)."""
    reason = reason_of(exc)
    errors.print(
        f"[bold red]agentrt run:[/] {exc.code().name}"
        + (f" {reason}" if reason else "")
        + f": {escape(exc.details() or '')}",
        highlight=False,
    )


async def _start_detached(
    runs_addr: str,
    request: run_service_pb2.StartRunRequest,
    console: Console,
    errors: Console,
    token: str,
    tls: TlsConfig,
) -> int:
    """`--detach`: StartRun only; print the run and session ids (0), or the refusal (4)."""
    client = MeshClient(runs=runs_addr, token=token, tenant=env("TENANT", ""), tls=tls)
    try:
        started = await client.run_service.StartRun(request)
    except grpc.aio.AioRpcError as exc:
        _print_refusal(errors, exc)
        return EXIT_UNREACHABLE
    finally:
        await client.close()
    console.print(f"run {started.run_id} started (session {started.session_id})", highlight=False)
    console.print(f"follow it: agentrt runs show {started.run_id}", highlight=False)
    return 0


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
        if tasks_addr and request.HasField("agent"):
            # registered, so a task it spawns runs as it (tasks inherit a registered agent)
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
        _print_refusal(errors, exc)
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
