"""Delivering a task's ending to its parent session, exactly once (004 §2.13).

An ending is owed from the transaction that recorded it (Finalize, ReleaseRetryClaim, the
sweep) until one of two things hands it over:

- the model's path: a task tool's answer carried the terminal result (the caller asked
  to hold it and acknowledged it with AckTaskResult once the model had it);
- a notification: one user-role entry appended to the parent session's incarnation the
  task is bound to (the model reads it verbatim at its next turn; a UI renders its
  display as a card). Its text is `agentrt.core.tasknote`'s format.

A delivery waits `notify_grace_seconds` first (a model waiting on the task in-turn takes
it before then), is claimed by one deliverer at a time, and is appended at most once:
the deliverer records the parent's last seq before appending (guarded by
expected_last_seq), and a deliverer that finds a recorded seq (its predecessor died
between the append and the record) looks for the entry, by the delivery id in its
display, before appending. A parent that answers "no such session" has its tree removed;
any other failure gives the claim back to be tried again later.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from agentrt.core.errors import MeshError, Status
from agentrt.core.tasknote import TaskLine, format_notification
from agentrt.tasks.background import run_passes, stop_passes
from agentrt.tasks.domain import Task, TaskStatus
from agentrt.tasks.lifecycle.launch import Deps
from agentrt.tasks.lifecycle.tree import Trees
from agentrt.tasks.peers import is_gone, ref
from agentrt.tasks.storage.upkeep import CLAIMED
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as spb

log = logging.getLogger("agentrt.tasks")

#: How long one deliverer holds a claimed delivery, in seconds.
CLAIM_S = 30.0
#: How long a delivery that failed waits before it is tried again, in seconds.
RETRY_S = 2.0
#: Appends tried against a parent whose log keeps moving, before the claim is given back.
APPEND_TRIES = 5
#: The key of the notification's facts in the entry's display.extra_json.
EXTRA_KEY = "task_notification"


def notification_entry(task: Task) -> spb.Entry:
    """The parent-session entry that announces task's ending."""
    line = TaskLine(
        task.task_id,
        str(task.status),
        max(task.attempt, 1),
        max(task.max_attempts, 1),
        task.label,
        task.summary,
    )
    text = format_notification([line])
    message = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    facts = {
        "task_id": task.task_id, "delivery_id": task.delivery_id, "status": str(task.status),
        "attempt": task.attempt, "max_attempts": task.max_attempts, "run_id": task.run_id,
        "label": task.label, "kind": task.kind, "session_id": task.session_id,
    }  # fmt: skip
    title = f"task {task.label or task.task_id}: {task.status}"
    return spb.Entry(
        kind="item",
        item=spb.Item(message=message, source=spb.ITEM_SOURCE_RUNTIME),
        display=spb.Display(
            title=title[:200], summary=task.summary, extra_json=json.dumps({EXTRA_KEY: facts})
        ),
    )


def _delivery_of(entry: spb.Entry) -> str:
    try:
        extra = json.loads(entry.display.extra_json or "{}")
    except ValueError:
        return ""
    facts = extra.get(EXTRA_KEY) if isinstance(extra, dict) else None
    return str(facts.get("delivery_id", "")) if isinstance(facts, dict) else ""


class Deliverer:
    """Notifies parents of owed endings (see the module docstring)."""

    def __init__(self, deps: Deps, trees: Trees) -> None:
        """Deliver through deps; remove the trees of parents found gone through trees."""
        self.deps = deps
        self.trees = trees
        self._loop: asyncio.Task[None] | None = None

    async def pass_once(self) -> int:
        """Deliver every due ending; return how many were notified."""
        notified = 0
        for task in await self.deps.upkeep.due_deliveries(time.time(), 100):
            notified += await self.deliver(task)
        return notified

    async def deliver(self, task: Task) -> bool:
        """Notify task's owed ending to its parent session; True once it is there."""
        upkeep, now = self.deps.upkeep, time.time()
        claimed = await upkeep.claim_delivery(task, now, now + CLAIM_S)
        if claimed is None:
            return False
        task, base = claimed
        if task.status not in (TaskStatus.COMPLETED, TaskStatus.FAILED):
            await upkeep.ack(task, task.delivery_id)  # nothing to announce (a cancellation)
            return False
        parent = ref(task.parent_session_id, task.parent_generation)
        try:
            seq = await self._append_once(task, parent, base)
        except MeshError as err:
            if is_gone(err):
                await self.trees.remove(task.tenant, task.parent_session_id, task.parent_generation)
                return False
            log.warning("task %s: notifying session %s failed: %s", task.task_id, task.parent_session_id, err)
            await upkeep.release_delivery(task, task.delivery_id, time.time() + RETRY_S)
            return False
        if seq is None:
            await upkeep.release_delivery(task, task.delivery_id, time.time() + RETRY_S)
            return False
        if await upkeep.delivered(task, task.delivery_id, seq) is not None:
            self.deps.hub.changed()
        log.info(
            "task %s: %s notified to session %s at seq %d", task.task_id, task.status, parent.session_id, seq
        )
        return True

    async def _append_once(self, task: Task, parent: spb.SessionRef, base: int) -> int | None:
        """Append the notification unless it is there already; return its seq (None: try later)."""
        peers, upkeep = self.deps.peers, self.deps.upkeep
        if base == CLAIMED:
            base = (await peers.get_session(task.tenant, parent.session_id, parent.generation)).last_seq
            if not await upkeep.set_delivery_base(task, task.delivery_id, base):
                return None
        else:
            found = await self._find(task, parent, base)
            if found is not None:
                return found
        expected = base
        for _ in range(APPEND_TRIES):
            try:
                stored = await peers.append(task.tenant, parent, [notification_entry(task)], expected)
                return stored[0].seq
            except MeshError as err:
                if err.status != Status.ABORTED:
                    raise
            found = await self._find(task, parent, base)
            if found is not None:
                return found
            expected = (await peers.get_session(task.tenant, parent.session_id, parent.generation)).last_seq
        return None

    async def _find(self, task: Task, parent: spb.SessionRef, base: int) -> int | None:
        for entry in await self.deps.peers.entries_after(task.tenant, parent, base):
            if _delivery_of(entry) == task.delivery_id:
                return entry.seq
        return None

    def start(self) -> None:
        """Deliver in the background, every poll interval."""
        poll = self.deps.config.poll_seconds
        self._loop = run_passes(
            "agentrt-tasks-delivery", "delivery pass", self.pass_once, lambda: self.deps.hub.wait(poll)
        )

    async def stop(self) -> None:
        """Stop delivering (claims expire; another replica or a restart delivers)."""
        await stop_passes(self._loop)
