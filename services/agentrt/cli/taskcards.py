"""`agentrt run --tasks`: the run's background tasks, live, beside its events (004 §2.13).

`TaskCards.show(task)` prints a line when a task of the session first appears (its spawn)
and a card when it ends (status, attempt, label, summary: the same facts as the
notification the model reads, which a UI renders as a card), and a line when its
notification lands in the session (`notified_seq`). It holds the last state seen per task,
so a repeated change prints nothing.

`watch_tasks()` follows TaskService.WatchTasks of the parent session, reconnecting from
the last change seq it saw when the stream breaks, until it is cancelled or the parent's
tree is removed (the stream ends OK). The caller decides when to stop: `agentrt run`
stops once its run has ended and no task of the session is still live.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from agentrt.client.channels import MeshClient
from agentrt.v1 import task_service_pb2 as pb

_LIVE = (pb.TASK_STATUS_WORKING, pb.TASK_STATUS_INPUT_REQUIRED)
_STYLE = {
    pb.TASK_STATUS_COMPLETED: ("completed", "green"),
    pb.TASK_STATUS_FAILED: ("failed", "red"),
    pb.TASK_STATUS_CANCELED: ("canceled", "yellow"),
    pb.TASK_STATUS_INPUT_REQUIRED: ("needs input", "yellow"),
    pb.TASK_STATUS_WORKING: ("working", "cyan"),
}
#: Longest pause between two reconnects of a broken WatchTasks stream, in seconds.
MAX_BACKOFF_S = 5.0


def _name(task: pb.Task) -> str:
    return escape(task.label or task.task_id)


class TaskCards:
    """Renders a session's task changes (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        """Print to console."""
        self.console = console
        self._seen: dict[str, tuple[int, int, int]] = {}
        self.changed = asyncio.Event()

    @property
    def live(self) -> int:
        """How many tasks seen are still working or waiting on a person."""
        return sum(1 for status, _, _ in self._seen.values() if status in _LIVE)

    def show(self, task: pb.Task) -> None:
        """Print what changed about task since it was last shown."""
        before = self._seen.get(task.task_id)
        self._seen[task.task_id] = (task.status, task.attempt, task.notified_seq)
        word, color = _STYLE.get(task.status, ("unknown", "white"))  # type: ignore[call-overload]
        if before is None or (before[1] != task.attempt and task.status in _LIVE):
            verb = "spawned" if before is None or task.attempt <= 1 else f"retried (attempt {task.attempt})"
            self.console.print(
                f"[magenta]⇢ task {_name(task)} {verb}[/] [dim]{task.task_id}[/]", highlight=False
            )
        if task.status == pb.TASK_STATUS_INPUT_REQUIRED and (before is None or before[0] != task.status):
            self.console.print(f"[yellow]⏸ task {_name(task)} waits for an approval[/]", highlight=False)
        if task.status not in _LIVE and (
            before is None or before[0] != task.status or before[1] != task.attempt
        ):
            body = escape(task.summary or task.failure.message or "(no summary)")
            title = f"task {_name(task)}: [{color}]{word}[/] (attempt {task.attempt}/{task.max_attempts})"
            self.console.print(Panel(body, title=title, title_align="left", border_style=color, expand=False))
        if task.notified_seq and (before is None or before[2] != task.notified_seq):
            self.console.print(
                f"[dim]  task {_name(task)}: its notification is in the session (seq {task.notified_seq})[/]",
                highlight=False,
            )
        self.changed.set()

    async def until_idle(self) -> None:
        """Return once no task shown is live."""
        while self.live:
            self.changed.clear()
            await self.changed.wait()


async def watch_tasks(client: MeshClient, session_id: str, cards: TaskCards) -> None:
    """Show every task change of session_id until cancelled (see the module docstring).

    Raises:
        grpc.aio.AioRpcError: WatchTasks refused the request (INVALID_ARGUMENT, NOT_FOUND).
    """
    after, failures = 0, 0
    while True:
        try:
            stream = client.task_service.WatchTasks(
                pb.WatchTasksRequest(parent_session_id=session_id, after_change_seq=after)
            )
            async for message in stream:
                after, failures = max(after, message.task.change_seq), 0
                cards.show(message.task)
            return  # the parent's tree was removed
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            failures += 1
            await asyncio.sleep(min(0.2 * 2**failures, MAX_BACKOFF_S))  # backoff, not a wait for state


async def stop_watching(watcher: asyncio.Task[None]) -> None:
    """Cancel a watch_tasks task and wait for it."""
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await watcher
