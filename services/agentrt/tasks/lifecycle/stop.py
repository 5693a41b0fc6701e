"""Stopping a task: what the stop DID, in one of four answers (004 §2.13).

The run loop is asked first for a working task with a run (or the run's own completion
would record a success for something the person stopped); a paused one is claimed first
(the finalize is the exclusive claim against a concurrent approval), then its run is
cancelled; one being launched is claimed, and the launcher's bind then loses and cancels
the run it started. RunService's answer to CancelRun is one of four (`RunStop`):

- STOPPED: the run ended canceled; the stop records the cancellation.
- AFTER_TURN: the run is still going (another replica of the run loop honours the cancel
  at its next step) and will record its own ending; the only answer that ends the call
  with the task still live.
- ALREADY_FINISHED: the run had ended. Ordinary, because the run loop records an ending
  before it reaches the task row; but it is also what a stop hears when a retry landed
  between its read and its call. So it claims nothing: it waits, briefly and boundedly,
  for the ending to land on the row, and when the row moved to another launch it stops
  that one (a stop chases one retry, as it names the task, not the run). Only when no
  ending arrives is one recorded: the run's own, read from RunService, or else a
  cancellation (an outcome that is lost is replaced, never waited for forever).
- UNKNOWN: RunService has no such run; the stop records the cancellation.

The answers to the caller (`StopResult`): CANCELED, AFTER_TURN, ALREADY_FINISHED (the task
had ended before the stop) and FINISHED_FIRST (it was live, but its run's own ending
landed first and was kept).
"""

from __future__ import annotations

import enum
import time

from agentrt.core.errors import MeshError, Reason, Status, not_found
from agentrt.core.tasknote import summarize
from agentrt.tasks.domain import Outcome, Task, TaskStatus
from agentrt.tasks.lifecycle.attempts import Attempts
from agentrt.tasks.lifecycle.launch import Deps, outcome_of
from agentrt.tasks.peers import is_finished, is_gone
from agentrt.v1 import common_pb2 as cpb

_CANCELED = Outcome(TaskStatus.CANCELED)
_ENDED = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)


class RunStop(enum.Enum):
    """RunService's answer to a CancelRun (see the module docstring)."""

    STOPPED = "stopped"
    AFTER_TURN = "after_turn"
    ALREADY_FINISHED = "already_finished"
    UNKNOWN = "unknown"


class StopResult(enum.Enum):
    """What a stop did, as StopTask answers it."""

    CANCELED = "canceled"
    AFTER_TURN = "after_turn"
    ALREADY_FINISHED = "already_finished"
    FINISHED_FIRST = "finished_first"


class Stopper:
    """Stops tasks (see the module docstring)."""

    def __init__(self, deps: Deps, attempts: Attempts) -> None:
        """Stop through deps; attempts' launcher cancels runs."""
        self.deps = deps
        self.attempts = attempts

    async def stop_run(self, tenant: str, run_id: str, reason: str) -> RunStop:
        """Ask RunService to cancel a run; return its answer as one of the four.

        Raises:
            MeshError: RunService could not be asked (the stop did nothing).
        """
        try:
            run = await self.deps.peers.cancel_run(tenant, run_id, reason)
        except MeshError as err:
            if is_finished(err):
                return RunStop.ALREADY_FINISHED
            if is_gone(err):
                return RunStop.UNKNOWN
            raise
        if run.status == cpb.RUN_STATUS_CANCELED:
            return RunStop.STOPPED
        if run.status in _ENDED:
            return RunStop.ALREADY_FINISHED
        return RunStop.AFTER_TURN

    async def stop(self, tenant: str, task_id: str, reason: str) -> tuple[StopResult, Task]:
        """Stop a task; return what the stop did and the task afterwards.

        Raises:
            MeshError: NOT_FOUND/TASK_NOT_FOUND; UNAVAILABLE when RunService could not be
                asked to cancel the run (nothing was recorded); ABORTED/RETRY_CONFLICT when
                the task moved to a new run twice while it was being stopped.
        """
        task = await self.deps.store.get(tenant, task_id)
        if task is None:
            raise not_found(Reason.TASK_NOT_FOUND, f"task {task_id!r} not found")
        if task.terminal:
            return StopResult.ALREADY_FINISHED, task
        for _ in range(2):  # the first pass, and one chase of a retry that landed meanwhile
            answer = await self._pass(task, reason or "stopped")
            if answer is not None:
                return answer
            now = await self.deps.store.get(tenant, task_id)
            if now is None:
                raise not_found(Reason.TASK_NOT_FOUND, f"task {task_id!r} not found")
            if now.terminal:
                return self._ended(now), now
            task = now
        raise MeshError(Status.ABORTED, Reason.RETRY_CONFLICT, f"task {task_id!r} kept moving; stop it again")

    @staticmethod
    def _ended(task: Task) -> StopResult:
        return StopResult.CANCELED if task.status == TaskStatus.CANCELED else StopResult.FINISHED_FIRST

    async def _claim(self, task: Task) -> Task | None:
        done = await self.deps.store.finalize(task, task.launch_id, _CANCELED, "")
        if done is not None:
            self.deps.hub.changed()
        return done

    async def _pass(self, task: Task, reason: str) -> tuple[StopResult, Task] | None:
        """Stop the launch task names; None when the row moved to another launch meanwhile."""
        if task.status == TaskStatus.INPUT_REQUIRED or task.launching:
            claimed = await self._claim(task)
            if claimed is None:
                return None
            if claimed.run_id:
                await self.attempts.launcher.cancel_quietly(task.tenant, claimed.run_id, reason)
            return StopResult.CANCELED, claimed
        answer = await self.stop_run(task.tenant, task.run_id, reason)
        if answer == RunStop.AFTER_TURN:
            return StopResult.AFTER_TURN, task
        if answer in (RunStop.STOPPED, RunStop.UNKNOWN):
            claimed = await self._claim(task)
            if claimed is not None:
                return StopResult.CANCELED, claimed
            return await self._settled(task)
        return await self._late_outcome(task)

    async def _settled(self, task: Task) -> tuple[StopResult, Task] | None:
        """The row after a lost claim: ended on this launch, or None (it moved on)."""
        now = await self.deps.store.get(task.tenant, task.task_id)
        if now is not None and now.launch_id == task.launch_id and now.terminal:
            return self._ended(now), now
        return None

    async def _late_outcome(self, task: Task) -> tuple[StopResult, Task] | None:
        """The run had ended: wait (bounded) for its ending to land; record one only if none did."""
        deadline = time.monotonic() + self.deps.config.stop_wait_seconds
        store = self.deps.store
        while True:
            now = await store.get(task.tenant, task.task_id)
            if now is None or now.launch_id != task.launch_id:
                return None
            if now.terminal:
                return self._ended(now), now
            if time.monotonic() >= deadline:
                break
            await self.deps.hub.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
        # Nothing arrived: the run's own ending, read from its record, else a cancellation.
        outcome = _CANCELED
        try:
            run = await self.deps.peers.get_run(task.tenant, task.run_id)
            if run.status in _ENDED:
                outcome = outcome_of(run)
        except MeshError:
            pass
        text = outcome.output if outcome.failure is None else outcome.failure.message
        done = await store.finalize(
            now, now.launch_id, outcome, summarize(text, self.deps.config.limits.summary_chars)
        )
        if done is None:
            return await self._settled(task)
        self.deps.hub.changed()
        return self._ended(done), done
