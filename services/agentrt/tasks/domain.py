"""What a task is, independent of storage and transport (004 §2.13).

A `Task` is the durable entity; each run the task starts is one `launch`: the task
service mints the launch id before it asks RunService for the run (and sends it as the
run's idempotency key), so a launch is named before RunService has answered, and the
run id RunService mints is bound to it once StartRun returns. Every attempt-scoped
transition names the launch it observed and loses when the row has moved on (a retry, a
continuation, a stop, the restart sweep): that is the seed's "a finalizer names the
attempt it observed", with the launch id standing for the run id the seed mints itself.

`Limits` holds the bounds every axis a task can grow along has (depth, live tasks per
parent, attempts, chained runs, the summary, task_status's wait). `Outcome` is what a run
ended with, as the task sees it. No grpc, no SQL here.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field, replace

from agentrt.core.errors import MeshError, Reason, Status, precondition
from agentrt.core.ids import new_id


class TaskStatus(enum.StrEnum):
    """A task's state; the last three are terminal (input_required is not, 004 §2.13)."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """True for completed, failed and canceled."""
        return self in TERMINAL


TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELED})
LIVE = (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED)


@dataclass(frozen=True)
class Limits:
    """The bounds of 004 §2.13 (its defaults).

    Attributes:
        max_depth: how deep tasks nest; 1 = a task cannot spawn tasks.
        max_live_per_parent: working or input_required tasks one parent session may have
            at once; spawns and retries both take a slot.
        max_attempts: attempts per task (the first run counts; a failed launch does not).
        max_continuations: runs a task may chain after the first, since its spawn or last retry.
        summary_chars: bound on a summary, in characters.
        max_wait_seconds: bound on GetTask's wait (task_status), in seconds.
    """

    max_depth: int = 1
    max_live_per_parent: int = 6
    max_attempts: int = 3
    max_continuations: int = 50
    summary_chars: int = 300
    max_wait_seconds: float = 120.0


@dataclass(frozen=True)
class Failure:
    """A structured failure (FailureInfo of common.proto)."""

    kind: str
    message: str
    retryable: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Task:
    """One task row (see docs/services/tasks.md for every field).

    Times are seconds since the Unix epoch. `launch_id` names the current run of the
    current attempt; `run_id` is RunService's id for it, "" until StartRun answered (or
    when the attempt's launch failed).
    """

    tenant: str
    task_id: str
    parent_session_id: str
    parent_generation: int
    status: TaskStatus
    launch_id: str
    input: str
    parent_run_id: str = ""
    session_id: str = ""
    session_generation: int = 0
    depth: int = 1
    kind: str = ""
    label: str = ""
    state: str = ""
    agent_name: str = ""
    agent_version: int = 0
    agent_spec: bytes | None = None
    steps: tuple[str, ...] = ()
    step: int = 0
    workspace: str = ""
    run_id: str = ""
    attempt: int = 1
    max_attempts: int = 3
    continuations: int = 0
    summary: str = ""
    result: str = ""
    failure: Failure | None = None
    owner: str = ""
    lease_until: float | None = None
    delivery_id: str = ""
    notified_seq: int = 0
    idempotency_key: str | None = None
    change_seq: int = 0
    create_time: float = field(default_factory=time.time)
    update_time: float = field(default_factory=time.time)

    @property
    def terminal(self) -> bool:
        """True once the task has ended (it may still be retried when failed)."""
        return self.status.terminal

    @property
    def live(self) -> bool:
        """True while working or waiting on a human."""
        return not self.status.terminal

    @property
    def launching(self) -> bool:
        """True while the current run is being launched (no run id bound yet)."""
        return self.status == TaskStatus.WORKING and not self.run_id

    @property
    def step_input(self) -> str:
        """The input of the current step."""
        return self.input if self.step == 0 else self.steps[self.step - 1]

    def with_changes(self, **changes: object) -> Task:
        """Return a copy with fields replaced."""
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as the task sees it.

    Attributes:
        status: completed, failed or canceled.
        output: the final output when completed.
        failure: the failure when failed.
    """

    status: TaskStatus
    output: str = ""
    failure: Failure | None = None


def new_launch_id() -> str:
    """Return a fresh launch id (the idempotency key of the run it names)."""
    return new_id("tl")


def retry_input(failure: Failure | None, step_input: str) -> str:
    """Return the input of a retry's run: the failure, then the step the attempt was on.

    The hidden session keeps the failed attempt's tail (persistence never leaves a call
    without its output, 004 §2.5), so the new run continues after it rather than over it.
    """
    why = failure.message if failure is not None and failure.message else "an error"
    return (
        f"Your previous attempt at this task ended with a failure: {why}\n"
        f"Continue the task from where it stopped. The task was:\n{step_input}"
    )


def task_limit(parent: str, limit: int) -> MeshError:
    """FAILED_PRECONDITION/TASK_LIMIT: the parent has `limit` live tasks."""
    return precondition(
        Reason.TASK_LIMIT, f"session {parent!r} already has {limit} live tasks (the limit)", limit=str(limit)
    )


def not_retryable(task: Task) -> MeshError:
    """FAILED_PRECONDITION/TASK_NOT_RETRYABLE: only a failed task is retried."""
    return precondition(
        Reason.TASK_NOT_RETRYABLE, f"task {task.task_id!r} is {task.status}; only a failed task is retried",
        status=str(task.status),
    )  # fmt: skip


def attempts_exhausted(task: Task) -> MeshError:
    """FAILED_PRECONDITION/TASK_ATTEMPTS_EXHAUSTED: the attempt ceiling is reached."""
    return precondition(
        Reason.TASK_ATTEMPTS_EXHAUSTED,
        f"task {task.task_id!r} has used all {task.max_attempts} attempts",
        max_attempts=str(task.max_attempts),
    )


def retry_conflict(task_id: str) -> MeshError:
    """ABORTED/RETRY_CONFLICT: a concurrent writer moved the task between read and claim."""
    return MeshError(
        Status.ABORTED,
        Reason.RETRY_CONFLICT,
        f"task {task_id!r} changed while the retry claimed it; read it again",
    )
