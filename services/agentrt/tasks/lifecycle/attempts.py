"""Following a task's runs under a lease: pause, resume, ending, chaining (004 §2.13).

The replica that bound a run follows it: it reads the run (GetRun), then tails its events
(StreamRunEvents) and reads it again at every suspension, resumption and ending. The row
follows the run with transitions that all name the launch the follower watches:

- the run suspended (an approval) -> MarkInputRequired; resumed -> ReclaimWorking;
- the run completed with steps left -> Advance to the next launch, then launch it (a
  launch that fails ends the task failed); at the continuation bound the task fails;
- otherwise the run's ending is the task's: Finalize (a cancellation is delivered by the
  person who made it, so it owes the parent nothing).

A transition that loses means the row moved past this launch (a stop, a retry, the sweep,
a removal): the follower stops. A run RunService no longer knows fails the task.

The lease loop renews this replica's leases every third of the lease, stops following the
tasks it lost, adopts live tasks whose lease expired (their follower died; the run itself
lives on in RunService, so nothing is failed for it), and sweeps orphans: tasks left
mid-launch (`UpkeepStore.fail_orphans`), whose possible run is then cancelled by its
launch label. A launch this replica is starting itself is never its own sweep's orphan,
whatever its lease says. `sweep_at_start` is the same sweep, run once before the service
answers requests, counting this replica's own name as stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from agentrt.core.errors import MeshError
from agentrt.core.tasknote import summarize
from agentrt.tasks.domain import Failure, Outcome, Task, TaskStatus, new_launch_id
from agentrt.tasks.lifecycle.launch import (
    LABEL_LAUNCH,
    Deps,
    Launcher,
    launch_failure,
    outcome_of,
    spawn_background,
)
from agentrt.tasks.peers import is_gone
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb

log = logging.getLogger("agentrt.tasks")

_STATE_EVENTS = frozenset({"run_suspended", "run_resumed", "run_completed", "stream_end"})
_FINISHED = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
#: What a task interrupted mid-launch fails with.
ORPHANED = Failure(
    "interrupted", "the task service stopped while this attempt's run was being started", retryable=True
)
RUN_GONE = Failure("run_lost", "the run loop no longer knows this task's run", retryable=True)


class Attempts:
    """The runs this replica follows, and the lease loop (see the module docstring)."""

    def __init__(self, deps: Deps) -> None:
        """Follow runs through deps; nothing runs until `start()`."""
        self.deps = deps
        self.launcher = Launcher(deps, self.follow)
        self._watchers: dict[tuple[str, str], tuple[str, asyncio.Task[None]]] = {}
        #: Launches being started here, from their claim until their run is bound or released.
        self._launching: set[tuple[str, str, str]] = set()
        self._loop: asyncio.Task[None] | None = None
        self._closing = False

    @contextlib.contextmanager
    def launching(self, task: Task, launch_id: str) -> Iterator[None]:
        """Keep the lease of a launch this process is starting alive for the block's duration."""
        key = (task.tenant, task.task_id, launch_id)
        self._launching.add(key)
        try:
            yield
        finally:
            self._launching.discard(key)

    # -- following -----------------------------------------------------------------------------

    def follow(self, task: Task) -> None:
        """Follow the run bound to task's launch (once per launch)."""
        key = (task.tenant, task.task_id)
        current = self._watchers.get(key)
        if self._closing or (current is not None and current[0] == task.launch_id and not current[1].done()):
            return
        watcher = asyncio.create_task(self._watch(task), name=f"task-{task.task_id}")
        self._watchers[key] = (task.launch_id, watcher)

        def forget(done: asyncio.Task[None]) -> None:
            if self._watchers.get(key, ("", None))[1] is done:
                del self._watchers[key]
            if not done.cancelled() and done.exception() is not None:
                log.error("following task %s failed", key[1], exc_info=done.exception())

        watcher.add_done_callback(forget)

    def following(self, tenant: str, task_id: str) -> bool:
        """True while this replica follows a run of the task."""
        entry = self._watchers.get((tenant, task_id))
        return entry is not None and not entry[1].done()

    def forget(self, tenant: str, task_id: str) -> None:
        """Stop following the task (its row is gone or another replica has it)."""
        entry = self._watchers.pop((tenant, task_id), None)
        if entry is not None:
            entry[1].cancel()

    async def _watch(self, task: Task) -> None:
        peers, failures, after = self.deps.peers, 0, 0
        while not self._closing:
            try:
                run = await peers.get_run(task.tenant, task.run_id)
            except MeshError as err:
                if is_gone(err):
                    await self._finalize(task, Outcome(TaskStatus.FAILED, failure=RUN_GONE))
                    return
                failures = await self._backoff(failures)
                continue
            current = await self._apply(task, run)
            if current is None:
                return
            task = current
            try:
                async for event in peers.run_events(task.tenant, task.run_id, after):
                    after = event.seq
                    if event.WhichOneof("payload") in _STATE_EVENTS:
                        break
                failures = 0
            except MeshError:
                failures = await self._backoff(failures)

    @staticmethod
    async def _backoff(failures: int) -> int:
        await asyncio.sleep(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
        return failures + 1

    async def _reread(self, task: Task) -> Task | None:
        """The row, while it is still live on task's launch; None when the watch is over."""
        now = await self.deps.store.get(task.tenant, task.task_id)
        if now is None or now.launch_id != task.launch_id or now.terminal:
            return None
        return now

    async def _apply(self, task: Task, run: rpb.Run) -> Task | None:
        """Bring the row in line with the run; None when the watch is over."""
        store, launch = self.deps.store, task.launch_id
        if not task.workspace and run.workspace:
            task = await store.set_workspace(task, launch, run.workspace) or task
        if run.status in _FINISHED:
            await self.run_ended(task, run)
            return None
        moved: Task | None
        if run.status == cpb.RUN_STATUS_SUSPENDED and task.status == TaskStatus.WORKING:
            moved = await store.mark_input_required(task, launch)
        elif run.status == cpb.RUN_STATUS_RUNNING and task.status == TaskStatus.INPUT_REQUIRED:
            moved = await store.reclaim_working(task, launch)
        else:
            return await self._reread(task)
        if moved is None:
            return await self._reread(task)
        self.deps.hub.changed()
        return moved

    async def run_ended(self, task: Task, run: rpb.Run) -> None:
        """Record a finished run's ending on task (finalize, or chain the next step)."""
        outcome = outcome_of(run)
        if outcome.status == TaskStatus.COMPLETED and task.step < len(task.steps):
            await self._continue(task)
            return
        await self._finalize(task, outcome)

    async def _finalize(self, task: Task, outcome: Outcome, launch_id: str = "") -> Task | None:
        text = outcome.output if outcome.failure is None else outcome.failure.message
        summary = summarize(text, self.deps.config.limits.summary_chars)
        done = await self.deps.store.finalize(task, launch_id or task.launch_id, outcome, summary)
        if done is not None:
            log.info("task %s %s (attempt %d)", done.task_id, done.status, done.attempt)
            self.deps.hub.changed()
        return done

    async def _continue(self, task: Task) -> None:
        limits, store = self.deps.config.limits, self.deps.store
        if task.continuations >= limits.max_continuations:
            bound = Failure(
                "continuation_limit",
                f"the task chained {task.continuations} runs, its bound",
                retryable=False,
            )
            await self._finalize(task, Outcome(TaskStatus.FAILED, failure=bound))
            return
        next_launch = new_launch_id()
        # Registered before the advance: a lease pass that sees the old launch gone from the
        # row must not take this watcher for one whose task another replica took.
        with self.launching(task, next_launch):
            advanced = await store.advance(
                task,
                task.launch_id,
                next_launch,
                limits.max_continuations,
                owner=self.deps.owner,
                lease_until_s=self.deps.lease_until(),
            )
            if advanced is None:
                # The claim lost: end the run that ended, failed; Finalize's predicate decides
                # (a stop, retry or sweep that moved the row wins).
                lost = Failure("continuation_lost", "the task changed while its next run was chained")
                await self._finalize(task, Outcome(TaskStatus.FAILED, failure=lost))
                return
            self.deps.hub.changed()
            try:
                await self.launcher.start(advanced, next_launch, advanced.step_input)
            except MeshError as err:
                failure = launch_failure(err)
                await self._finalize(advanced, Outcome(TaskStatus.FAILED, failure=failure), next_launch)

    # -- the lease loop and the sweep ----------------------------------------------------------

    async def sweep_at_start(self) -> list[Task]:
        """Fail what a previous life left mid-launch (FailOrphans); return the failed tasks.

        Runs before the service answers requests. Each orphan's delivery is owed in the
        sweep's own transaction, so its parent is told; a run it may have started is
        cancelled in the background once RunService answers.
        """
        return await self._sweep(stale_owner=self.deps.owner)

    async def _sweep(self, stale_owner: str = "") -> list[Task]:
        cfg = self.deps.config
        # The launches this process is starting are spared whatever their lease says: a
        # pass that stalled past the lease (or ran while a chain moved its row to the next
        # launch) must not fail a launch it is itself in the middle of (decision 0052).
        orphans = await self.deps.upkeep.fail_orphans(
            time.time(), ORPHANED, cfg.notify_grace_seconds, stale_owner, spare=self._launching
        )
        for orphan in orphans:
            log.warning(
                "task %s: interrupted mid-launch, failed (attempt %d)", orphan.task_id, orphan.attempt
            )
            spawn_background(self._compensate(orphan), f"compensate-{orphan.task_id}")
        if orphans:
            self.deps.hub.changed()
        return orphans

    async def _compensate(self, orphan: Task) -> None:
        """Cancel the run an interrupted launch may have started (found by its launch label)."""
        if not orphan.session_id:
            return
        for run in await self.deps.peers.list_runs(orphan.tenant, orphan.session_id):
            if run.labels.get(LABEL_LAUNCH) == orphan.launch_id and run.status not in _FINISHED:
                await self.launcher.cancel_quietly(orphan.tenant, run.run_id, "its task was interrupted")

    async def start(self) -> None:
        """Start the lease loop (its first pass adopts what this replica's name held)."""
        self._loop = asyncio.create_task(self._lease_loop(), name="agentrt-tasks-leases")

    async def _lease_loop(self) -> None:
        period = max(self.deps.config.lease_seconds / 3, 0.05)
        first = True
        while not self._closing:
            try:
                await self.pass_once(stale_owner=self.deps.owner if first else "")
                first = False
            except Exception:  # noqa: BLE001 - the loop outlives a database hiccup
                log.exception("task lease pass failed")
            await asyncio.sleep(period)

    async def pass_once(self, stale_owner: str = "") -> None:
        """One pass: renew, drop lost tasks, adopt expired ones, sweep orphans."""
        upkeep, owner = self.deps.upkeep, self.deps.owner
        busy = {(k[0], k[1], launch) for k, (launch, _) in self._watchers.items()} | self._launching
        held = await upkeep.renew(owner, busy, self.deps.lease_until())
        chaining = {(k[0], k[1]) for k in self._launching}
        for key, (launch, _) in list(self._watchers.items()):
            # A watcher chaining its task's next run has moved the row to a new launch itself.
            if (key[0], key[1], launch) not in held and key not in chaining:
                self.forget(*key)
        now = time.time()
        for task in await upkeep.adoptable(now, 100, stale_owner):
            if self.following(task.tenant, task.task_id):
                continue
            adopted = await upkeep.adopt(task, owner, now, self.deps.lease_until(), stale_owner)
            if adopted is not None:
                log.info("task %s: adopted by %s", task.task_id, owner)
                self.follow(adopted)
        await self._sweep()

    async def stop(self) -> None:
        """Stop following (leases of bound runs are released for another replica to adopt)."""
        self._closing = True
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        watchers = [t for _, t in self._watchers.values()]
        for watcher in watchers:
            watcher.cancel()
        for watcher in watchers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        self._watchers.clear()
        with contextlib.suppress(Exception):
            await self.deps.upkeep.release_leases(self.deps.owner)
