"""Waking the parent when a task's notification lands (004 §2.13 "the wake-up").

A notification entry is read by the model at the parent's next turn; the wake makes sure
there is one. It is owed from the transaction that records the notification's seq
(storage/wakes.py) until the parent's run loop has been asked for a turn that reads it,
through RunService's own RPCs (this service never touches runs' tables):

- the parent session has an unfinished run (running, or suspended on an approval): the
  wake is queued on it as `steer` input (InjectInput), consumed at its next save point or
  at its final answer, which then continues: the run that was talking reads the
  notification before it ends;
- it has none (idle): a follow-up run is started on it (StartRun), as the agent that
  spawned the task (the parent run's registered agent and version), with idempotency key
  `wake-<task>-<seq>`, so a wake re-sent after a crash starts nothing twice, and the label
  `agentrt.task_wake` = the task id. A StartRun that meets SESSION_BUSY (someone started a
  run meanwhile) goes round again and queues on that run.

Nothing is woken for a task a client spawned (no parent run, so no agent to run as), for
a parent run of an inline agent (no registered spec to start), nor by StartRun for a
parent that is itself a task's hidden session (its runs are its task's launches): the
notification is in the session for the next turn either way, and the wake is dropped
with a log line. A parent session that is gone (deleted, recreated) has its tree removed.
Queued steer input is the one step that is not idempotent: a waker that dies between
InjectInput and recording it may queue a second wake line on a later pass.
"""

from __future__ import annotations

import asyncio
import logging
import time

from agentrt.core.errors import MeshError, Reason
from agentrt.tasks.background import run_passes, stop_passes
from agentrt.tasks.callers import Callers
from agentrt.tasks.domain import Task
from agentrt.tasks.lifecycle.launch import Deps
from agentrt.tasks.lifecycle.tree import Trees
from agentrt.tasks.peers import is_gone
from agentrt.tasks.storage.wakes import WakeStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb

log = logging.getLogger("agentrt.tasks")

#: How long one waker holds a claimed wake, in seconds.
CLAIM_S = 30.0
#: How long a wake that could not be made waits before it is tried again, in seconds.
RETRY_S = 1.0
#: Label of a follow-up run started to wake a parent: the task whose notification it reads.
LABEL_WAKE = "agentrt.task_wake"
#: The input of a wake: it points at the notification entry above it.
WAKE_TEXT = (
    "[task wake] A background task has reported: its [task notification] is above. "
    "Take its result into account and continue."
)
_UNFINISHED = (cpb.RUN_STATUS_RUNNING, cpb.RUN_STATUS_SUSPENDED)


class Waker:
    """Wakes parents for landed notifications (see the module docstring)."""

    def __init__(self, deps: Deps, wakes: WakeStore, callers: Callers, trees: Trees) -> None:
        """Wake through deps' peers; read the parent run through callers; remove gone trees."""
        self.deps = deps
        self.wakes = wakes
        self.callers = callers
        self.trees = trees
        self._loop: asyncio.Task[None] | None = None

    async def pass_once(self) -> int:
        """Make every due wake; return how many parents were woken."""
        woken = 0
        for task, seq in await self.wakes.due(time.time(), 100):
            woken += await self.wake(task, seq)
        return woken

    async def wake(self, task: Task, seq: int) -> bool:
        """Wake task's parent for the notification at seq; True once its turn is asked for."""
        now = time.time()
        if not await self.wakes.claim(task, seq, now, now + CLAIM_S):
            return False
        try:
            woke = await self._wake(task, seq)
        except MeshError as err:
            if is_gone(err) and err.reason != Reason.RUN_NOT_FOUND:
                await self.trees.remove(task.tenant, task.parent_session_id, task.parent_generation)
                return False
            log.warning("task %s: waking session %s failed: %s", task.task_id, task.parent_session_id, err)
            woke = None
        if woke is None:
            await self.wakes.release(task, seq, time.time() + RETRY_S)
            return False
        await self.wakes.done(task, seq)
        return woke

    async def _wake(self, task: Task, seq: int) -> bool | None:
        """True: woken; False: nothing to wake (dropped); None: try again later."""
        tenant, parent, peers = task.tenant, task.parent_session_id, self.deps.peers
        await peers.get_session(tenant, parent, task.parent_generation)  # gone: the tree goes
        live = next((r for r in await peers.list_runs(tenant, parent) if r.status in _UNFINISHED), None)
        if live is not None:
            try:
                await peers.inject_input(tenant, live.run_id, WAKE_TEXT, rpb.INJECTION_KIND_STEER)
                log.info(
                    "task %s: woke run %s of session %s (seq %d)", task.task_id, live.run_id, parent, seq
                )
                return True
            except MeshError as err:
                if err.reason not in (Reason.RUN_FINISHED, Reason.RUN_NOT_FOUND):
                    raise
                return None  # it ended in between: look again
        if not task.parent_run_id or task.depth > 1:
            log.info("task %s: no parent run to wake in session %s", task.task_id, parent)
            return False
        try:
            asker = await self.callers.run(tenant, task.parent_run_id)
        except MeshError as err:
            if err.reason != Reason.RUN_NOT_FOUND:
                raise
            log.info("task %s: its parent run is gone; session %s not woken", task.task_id, parent)
            return False
        if not asker.agent_name:
            log.info("task %s: the parent run's agent is inline; session %s not woken", task.task_id, parent)
            return False
        req = rpb.StartRunRequest(
            agent_name=asker.agent_name, agent_version=asker.agent_version, input=WAKE_TEXT,
            session_id=parent, labels={LABEL_WAKE: task.task_id},
            idempotency_key=f"wake-{task.task_id}-{seq}",
        )  # fmt: skip
        try:
            run_id = await peers.start_run(tenant, req)
        except MeshError as err:
            if err.reason == Reason.SESSION_BUSY:
                return None  # a run started meanwhile: queue on it next pass
            raise
        log.info("task %s: started run %s to wake session %s (seq %d)", task.task_id, run_id, parent, seq)
        return True

    def start(self) -> None:
        """Wake in the background, every poll interval."""
        poll = self.deps.config.poll_seconds
        self._loop = run_passes(
            "agentrt-tasks-wake", "wake pass", self.pass_once, lambda: self.deps.hub.wait(poll)
        )

    async def stop(self) -> None:
        """Stop waking (claims expire; another replica or a restart wakes)."""
        await stop_passes(self._loop)
