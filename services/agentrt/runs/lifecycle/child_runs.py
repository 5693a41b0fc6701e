"""The manager's half of agents as tools: child runs across requests (004 §2.8, §2.2 step 6; 002 run tree).

The executor's half is runs/loop/phases/child/. Here:

- `ChildRuns` is the executor's `ChildHost`: it spawns a new child in this process (so the
  lease loop renews its lease) and cancels a child wherever it runs (`RunManager.cancel`).
- Approvals inside a child (docs/decisions/0018-child-run-approvals.md): a suspended child
  suspends its parent, whose `pending_calls` show the child's calls with `run_id` and
  `parent_call_id`. ResumeRun may answer them on the parent (each answer is forwarded to
  the run that waits, `split`) or on the child itself; either way the child resumes first,
  then `sync_parent` refreshes the parent's view of that child's calls and, once the parent
  waits on nothing, resumes it (a guarded write: SUSPENDED -> RUNNING); a grandparent
  follows the same way. Nothing of this is in memory: the parent's `child_pending` state and
  both rows are the truth, and the lease loop's `sync_all` repairs a parent whose refresh
  was lost to a crash between the child's resume and the parent's.
- Cancellation flows down: a canceled (or expired) parent cancels its unfinished children.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from agentrt.core.errors import MeshError
from agentrt.runs.domain import Resume, RunRecord, StoredEvent
from agentrt.runs.loop.phases.child import CHILD_PENDING, CHILD_RUN_IDS, PARENT_RUN_ID, annotated
from agentrt.v1 import common_pb2 as cpb

if TYPE_CHECKING:
    from agentrt.runs.manager import RunManager

log = logging.getLogger("agentrt.runs")


def split(record: RunRecord, req: Resume) -> tuple[Resume | None, list[Resume]]:
    """Split a ResumeRun by the run each answered call waits in (PendingCall.run_id).

    Returns:
        (the answers for `record` itself, or None; one Resume per child run, in order of
        first answer).
    """
    owner = {p.call.call_id: p.run_id for p in record.pending if p.run_id}
    own = Resume(run_id=record.run_id)
    subs: dict[str, Resume] = {}

    def to(call_id: str) -> Resume:
        target = owner.get(call_id)
        return subs.setdefault(target, Resume(run_id=target)) if target else own

    for d in req.decisions:
        to(d.call_id).decisions.append(d)
    for r in req.results:
        to(r.call_id).results.append(r)
    for c in req.reconciliations:
        to(c.call_id).reconciliations.append(c)
    has_own = bool(own.decisions or own.results or own.reconciliations)
    return (own if has_own else None), list(subs.values())


class ChildRuns:
    """Child runs for one RunManager (see the module docstring)."""

    def __init__(self, manager: RunManager) -> None:
        """Serve `manager`'s executors and requests."""
        self.m = manager

    def spawn_child(self, record: RunRecord, stored: list[StoredEvent]) -> None:
        """Execute a child run just inserted with this replica's lease (runs/loop/phases/child/ start)."""
        self.m.deps.metrics.runs_started.inc()
        self.m.spawn(record, record.fencing_token, stored[-1].seq, stored[-1].session_seq)

    async def cancel_child(self, tenant: str, run_id: str, reason: str) -> None:
        """Cancel a child run; one that has ended already is left as it is."""
        with contextlib.suppress(MeshError):
            await self.m.cancel(tenant, run_id, reason or "the parent run stopped")

    async def cancel_children(self, record: RunRecord, reason: str) -> None:
        """Cancel a stopped parent's unfinished children (and theirs, through `cancel`)."""
        for child_id in record.state.get(CHILD_RUN_IDS, []):
            child = await self.m.store.get_run(str(child_id))
            if child is not None and not child.finished:
                await self.cancel_child(record.tenant, child.run_id, reason or "the parent run was canceled")

    async def refresh(self, record: RunRecord) -> RunRecord:
        """Bring a suspended parent's view of its children up to date; return it read again."""
        shown = record.state.get(CHILD_PENDING) or {}
        if not shown:
            return record
        for child_id in list(shown):
            child = await self.m.store.get_run(str(child_id))
            if child is not None:
                await self.sync_parent(child)
        again = await self.m.store.get_run(record.run_id)
        return again if again is not None else record

    async def sync_parent(self, child: RunRecord) -> None:
        """Refresh the parent's pending calls from `child`; resume the parent when none is left.

        A no-op for a run without a parent, a parent that is not suspended, or a child whose
        pending calls the parent already shows. Never raises for a lost race (another replica
        resumed or ended the parent meanwhile).
        """
        parent_id = str(child.state.get(PARENT_RUN_ID, ""))
        if not parent_id:
            return
        store = self.m.store
        parent = await store.get_run(parent_id)
        if parent is None or parent.status != cpb.RUN_STATUS_SUSPENDED:
            return
        shown: dict[str, Any] = dict(parent.state.get(CHILD_PENDING) or {})
        if child.run_id not in shown:
            return
        now = await store.get_run(child.run_id)
        if now is None:
            return
        gone = set(shown.pop(child.run_id))
        mine = annotated(now) if now.status == cpb.RUN_STATUS_SUSPENDED else []
        if mine and {p.call.call_id for p in mine} == gone:
            return  # nothing changed
        if mine:
            shown[child.run_id] = [p.call.call_id for p in mine]
        state = {k: v for k, v in parent.state.items() if k != CHILD_PENDING}
        if shown:
            state[CHILD_PENDING] = shown
        pending = [p for p in parent.pending if p.call.call_id not in gone] + mine
        if pending:
            done = await store.save(
                parent.run_id,
                changes={"pending": pending, "state": state},
                expect_status=[cpb.RUN_STATUS_SUSPENDED],
            )
            if done is None:
                return
        else:
            state["suspension_reason"] = 0
            try:
                await self.m.wake(parent, {}, state, len(gone))
            except MeshError:
                return  # resumed or ended meanwhile
            log.info("run %s: resumed, its child run %s waits no more", parent.run_id, child.run_id)
        again = await store.get_run(parent.run_id)
        if again is not None:
            await self.sync_parent(again)  # the grandparent shows the parent's calls

    async def sync_all(self) -> None:
        """Repair every suspended parent whose view of its children is stale (the lease loop)."""
        for parent_id in await self.m.store.suspended_on_children():
            parent = await self.m.store.get_run(parent_id)
            if parent is not None:
                await self.refresh(parent)
