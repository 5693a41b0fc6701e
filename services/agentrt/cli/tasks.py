"""`agentrt tasks`: list a session's (or every) background task, stop one, retry one.

- `agentrt tasks [--session S]`: a table of tasks, newest first (id, status, attempt of
  its ceiling, kind and label, summary, last change); all of the tenant's without a session.
- `agentrt tasks stop ID [--reason R]`: stops the task and says what the stop did
  (canceled; still ending after its turn; had already finished; finished first).
- `agentrt tasks retry ID`: reopens a failed task on a new run and says which attempt runs.

Exit status: 0 done (any of a stop's four answers); 1 a retry whose run could not be
started (the task is failed again and the attempt not counted); 2 bad arguments; 4 the
task service could not be reached or refused the request (unknown task, not retryable,
limit reached, ...), with its status and reason printed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
from typing import Any

import grpc
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentrt.client.channels import MeshClient
from agentrt.mesh.config import DEFAULT_PORTS, env
from agentrt.mesh.status import reason_of
from agentrt.v1 import task_service_pb2 as pb

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 4

_STATUS_STYLE = {
    pb.TASK_STATUS_WORKING: "cyan",
    pb.TASK_STATUS_INPUT_REQUIRED: "yellow",
    pb.TASK_STATUS_COMPLETED: "green",
    pb.TASK_STATUS_FAILED: "red",
    pb.TASK_STATUS_CANCELED: "dim",
}
_OUTCOME_TEXT = {
    pb.STOP_OUTCOME_CANCELED: "canceled",
    pb.STOP_OUTCOME_AFTER_TURN: "stopping: its run ends after its current step and records its own ending",
    pb.STOP_OUTCOME_ALREADY_FINISHED: "had already finished; nothing changed",
    pb.STOP_OUTCOME_FINISHED_FIRST: "finished on its own before the stop could; its ending was kept",
}


def status_word(status: int) -> str:
    """Return the status as one word: working, input_required, completed, failed or canceled."""
    return pb.TaskStatus.Name(status).removeprefix("TASK_STATUS_").lower()


def add_parser(subparsers: Any) -> None:
    """Register the `tasks` subcommand."""
    p = subparsers.add_parser(
        "tasks",
        help="list, stop or retry background tasks",
        description="List background tasks (of one session, or all), or stop or retry one.",
    )
    p.add_argument(
        "action", nargs="?", choices=("list", "stop", "retry"), default="list", help="default: list"
    )
    p.add_argument("task_id", nargs="?", default="", metavar="ID", help="the task to stop or retry")
    p.add_argument("--session", default="", help="list this parent session's tasks (default: every task)")
    p.add_argument("--reason", default="", help="why, for a stop (recorded on the canceled run)")
    p.add_argument(
        "--tasks-addr",
        default=None,
        help="TaskService address (default AGENTRT_TASKS_ADDR or 127.0.0.1:50055)",
    )
    p.set_defaults(func=tasks_command)


def tasks_command(args: argparse.Namespace) -> int:
    """Run `agentrt tasks`; return the exit status (see the module docstring)."""
    errors = Console(stderr=True)
    if args.action == "list" and args.task_id:
        errors.print("agentrt tasks: list takes no ID (use --session to choose a session)")
        return EXIT_USAGE
    if args.action in ("stop", "retry") and not args.task_id:
        errors.print(f"agentrt tasks {args.action}: the task ID is required")
        return EXIT_USAGE
    address = args.tasks_addr or env("TASKS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['tasks']}")
    return asyncio.run(_command(args, address, Console(), errors))


async def _command(args: argparse.Namespace, address: str, console: Console, errors: Console) -> int:
    client = MeshClient(tasks=address, token=env("AUTH_TOKEN", ""), tenant=env("TENANT", ""))
    try:
        if args.action == "stop":
            return await _stop(client, args.task_id, args.reason, console)
        if args.action == "retry":
            return await _retry(client, args.task_id, console)
        return await _list(client, args.session, console)
    except grpc.aio.AioRpcError as exc:
        reason = reason_of(exc)
        errors.print(
            f"[bold red]agentrt tasks:[/] {exc.code().name}" + (f" {reason}" if reason else "")
            + f": {escape(exc.details() or '')}",
            highlight=False,
        )  # fmt: skip
        if exc.code() == grpc.StatusCode.UNAVAILABLE and not reason:
            errors.print(f"is the mesh running? start it with `agentrt up` (TaskService at {address})")
        return EXIT_UNREACHABLE
    finally:
        await client.close()


#: Below this terminal width the list prints a block per task instead of a table.
WIDE_COLUMNS = 120


def _when(task: pb.Task) -> str:
    stamp = task.update_time.ToDatetime(tzinfo=datetime.UTC).astimezone()
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def _styled(task: pb.Task) -> str:
    return f"[{_STATUS_STYLE.get(task.status, '')}]{status_word(task.status)}[/]"


async def _list(client: MeshClient, session: str, console: Console) -> int:
    stub = client.task_service
    tasks: list[pb.Task] = []
    token = ""
    while True:
        resp = await stub.ListTasks(pb.ListTasksRequest(parent_session_id=session, page_token=token))
        tasks.extend(resp.tasks)
        token = resp.next_page_token
        if not token:
            break
    if not tasks:
        console.print("no tasks" + (f" in session {escape(session)}" if session else ""))
        return 0
    if console.width < WIDE_COLUMNS:  # a table would squeeze label and summary to nothing
        for task in tasks:
            what = " / ".join(x for x in (task.kind, task.label) if x)
            console.print(
                f"[bold]{task.task_id}[/]  {_styled(task)}  attempt {task.attempt}/{task.max_attempts}"
                f"  {_when(task)}",
                highlight=False,
            )
            if what:
                console.print(f"  {escape(what)}", highlight=False)
            if task.summary:
                console.print(f"  {escape(task.summary)}", highlight=False)
        return 0
    table = Table(show_edge=False, pad_edge=False)
    for name in ("task", "status", "attempt", "kind / label", "summary", "changed"):
        table.add_column(name, no_wrap=name in ("task", "status", "attempt", "changed"))
    for task in tasks:
        what = " / ".join(x for x in (task.kind, task.label) if x)
        table.add_row(
            task.task_id, _styled(task), f"{task.attempt}/{task.max_attempts}", escape(what),
            escape(task.summary), _when(task),
        )  # fmt: skip
    console.print(table)
    return 0


async def _stop(client: MeshClient, task_id: str, reason: str, console: Console) -> int:
    resp = await client.task_service.StopTask(pb.StopTaskRequest(task_id=task_id, reason=reason))
    text = _OUTCOME_TEXT.get(resp.outcome, pb.StopOutcome.Name(resp.outcome))
    console.print(f"task {task_id}: {text} (status {_styled(resp.task)})", highlight=False)
    return 0


async def _retry(client: MeshClient, task_id: str, console: Console) -> int:
    resp = await client.task_service.RetryTask(pb.RetryTaskRequest(task_id=task_id))
    task = resp.task
    if not resp.launched:
        console.print(
            f"task {task_id}: the retry's run could not be started: {escape(task.failure.message)} "
            f"(status {_styled(task)}, attempt {task.attempt}/{task.max_attempts} not counted)",
            highlight=False,
        )
        return EXIT_FAILED
    console.print(
        f"task {task_id}: attempt {task.attempt}/{task.max_attempts} started (run {task.run_id})",
        highlight=False,
    )
    return 0
