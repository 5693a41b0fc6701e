"""Starting a task's run: two steps, and a terminator may land between them (004 §2.13).

A launch is claimed in the row first (spawn, retry or continuation writes its launch id),
then RunService is asked for the run, with the launch id as StartRun's idempotency key
and as a run label. Once StartRun answers, the run id is bound to the launch with a
compare-and-set: that is the re-read after launching. When the bind loses, the row no
longer names this launch as a working one (a stop, the restart sweep, a tree removal got
there first), and the run just started is cancelled, in a detached task so the caller's
own cancellation cannot cut the cleanup short. A bound run is handed to `follow`, which
watches it until it ends.

Before a retry's run starts, every live run of the task's hidden session is cancelled:
a run of a failed or swept attempt would otherwise hold the session (SESSION_BUSY) or,
worse, go on executing for a task that moved past it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from agentrt.core.errors import MeshError, Status
from agentrt.tasks.config import TasksConfig
from agentrt.tasks.domain import Failure, Outcome, Task, TaskStatus
from agentrt.tasks.lifecycle.hub import Hub
from agentrt.tasks.peers import Peers
from agentrt.tasks.storage.store import TaskStore
from agentrt.tasks.storage.upkeep import UpkeepStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb

log = logging.getLogger("agentrt.tasks")

T = TypeVar("T")

#: Run labels naming the task and launch a run belongs to.
LABEL_TASK = "agentrt.task_id"
LABEL_LAUNCH = "agentrt.task_launch"
_LIVE_RUNS = (cpb.RUN_STATUS_RUNNING, cpb.RUN_STATUS_SUSPENDED)
_background: set[asyncio.Task[Any]] = set()


@dataclass
class Deps:
    """What the task manager's parts share.

    Attributes:
        store: transitions and reads.
        upkeep: leases, the sweep, deliveries, trees.
        peers: RunService and SessionService.
        hub: wake-ups of local waits.
        config: the service's configuration.
        owner: this replica's lease owner name.
    """

    store: TaskStore
    upkeep: UpkeepStore
    peers: Peers
    hub: Hub
    config: TasksConfig
    owner: str

    def lease_until(self) -> float:
        """The expiry of a lease taken now, in seconds since the epoch."""
        return time.time() + self.config.lease_seconds


async def detached(coro: Coroutine[Any, Any, T]) -> T:
    """Await coro in a task of its own, so a cancellation of the caller does not cancel it."""
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return await asyncio.shield(task)


def spawn_background(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    """Run coro in the background, logging what it raises, keeping a reference to it."""

    async def guarded() -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a background job logs, never takes the process down
            log.exception("%s failed", name)

    task = asyncio.create_task(guarded(), name=name)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


def outcome_of(run: rpb.Run) -> Outcome:
    """The task's view of a finished run's ending."""
    if run.status == cpb.RUN_STATUS_COMPLETED:
        return Outcome(TaskStatus.COMPLETED, output=run.final_output)
    if run.status == cpb.RUN_STATUS_CANCELED:
        return Outcome(TaskStatus.CANCELED)
    f = run.failure
    failure = Failure(f.kind or "run_failed", f.message or "the run failed", f.retryable, f.reason)
    return Outcome(TaskStatus.FAILED, failure=failure)


def launch_failure(err: MeshError) -> Failure:
    """The failure recorded when RunService refused or could not take a run."""
    return Failure("launch_failed", f"the run could not be started: {err.message}", True, str(err.reason))


class Launcher:
    """Starts, binds and, when the bind loses, cancels a task's runs (see the module docstring)."""

    def __init__(self, deps: Deps, follow: Callable[[Task], None]) -> None:
        """Launch through deps; hand every bound run to follow."""
        self.deps = deps
        self.follow = follow

    def request(self, task: Task, launch_id: str, text: str) -> rpb.StartRunRequest:
        """The StartRun request of one launch of task."""
        req = rpb.StartRunRequest(
            input=text, session_id=task.session_id, workspace=task.workspace, idempotency_key=launch_id,
            labels={LABEL_TASK: task.task_id, LABEL_LAUNCH: launch_id},
        )  # fmt: skip
        if task.agent_spec is not None:
            req.agent.ParseFromString(task.agent_spec)
        else:
            req.agent_name, req.agent_version = task.agent_name, task.agent_version
        return req

    async def start(self, task: Task, launch_id: str, text: str) -> Task:
        """Start the run of launch_id and bind it; return the task as it is afterwards.

        Raises:
            MeshError: RunService refused the run or could not be reached (nothing was
                bound; the caller rolls its claim back).
        """
        peers = self.deps.peers
        run_id = await peers.start_run(task.tenant, self.request(task, launch_id, text))
        bound = await self.deps.store.bind_run(task, launch_id, run_id)
        if bound is None:
            log.info("task %s: launch %s lost its claim; cancelling run %s", task.task_id, launch_id, run_id)
            await detached(
                self.cancel_quietly(task.tenant, run_id, "the task was stopped while its run started")
            )
            now = await self.deps.store.get(task.tenant, task.task_id)
            return now if now is not None else task
        self.deps.hub.changed()
        self.follow(bound)
        return bound

    async def cancel_quietly(self, tenant: str, run_id: str, reason: str) -> None:
        """Cancel a run, taking "already ended" and "no such run" for done; log other failures."""
        try:
            await self.deps.peers.cancel_run(tenant, run_id, reason)
        except MeshError as err:
            if err.status not in (Status.NOT_FOUND, Status.FAILED_PRECONDITION):
                log.warning("cancelling run %s failed: %s", run_id, err)

    async def end_session_runs(self, task: Task, reason: str) -> bool:
        """Cancel every live run of task's hidden session and wait (bounded) until they ended.

        Returns:
            True when none is live any more; False when one was still ending at the bound.

        Raises:
            MeshError: RunService could not be asked.
        """
        if not task.session_id:
            return True
        peers = self.deps.peers
        live = [r for r in await peers.list_runs(task.tenant, task.session_id) if r.status in _LIVE_RUNS]
        for run in live:
            await self.cancel_quietly(task.tenant, run.run_id, reason)
        deadline = time.monotonic() + self.deps.config.cancel_wait_seconds
        for run in live:
            while True:
                now = await peers.get_run(task.tenant, run.run_id)
                if now.status not in _LIVE_RUNS:
                    break
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(0.05)
        return True
