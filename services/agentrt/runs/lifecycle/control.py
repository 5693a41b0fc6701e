"""Run control from outside an executor: resume, wake, cancel, inject, stop after the turn.

Each state change made here is one guarded transaction: the status it expects is part of
the write, so two replicas racing on one run cannot both win (a loser gets
FAILED_PRECONDITION). `RunControl` is the part of `RunManager` (runs/manager.py) that
answers ResumeRun, CancelRun, InjectInput and StopAfterTurn (004 §2.2, §2.3c, §2.8, §2.11b).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentrt.core.errors import MeshError, Reason, Status, invalid, missing, not_found, precondition
from agentrt.core.ids import valid_id
from agentrt.runs.convert.run import STOP_KIND
from agentrt.runs.domain import Answers, Resume, RunRecord, StoredEvent
from agentrt.runs.events.build import run_completed, run_ended_events, run_resumed_event, settle_unconsumed
from agentrt.runs.lifecycle.child_runs import split
from agentrt.runs.loop.phases.child import PARENT_RUN_ID
from agentrt.runs.loop.phases.tools import merge_answers
from agentrt.runs.spec.requests import check_answers, check_text_bytes
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

if TYPE_CHECKING:
    from agentrt.runs.lifecycle.child_runs import ChildRuns
    from agentrt.runs.loop.deps import Deps
    from agentrt.runs.loop.executor import RunExecutor

_INJECTION_KINDS = {
    pb.INJECTION_KIND_STEER: "steer",
    pb.INJECTION_KIND_NEXT_TURN: "next_turn",
    pb.INJECTION_KIND_FOLLOW_UP: "follow_up",
}
#: How long CancelRun waits for a local run to record its end, in seconds.
CANCEL_WAIT_S = 30.0
#: Reads and merges of one ResumeRun's answers when other replicas keep writing the run first.
ANSWER_ATTEMPTS = 5


class _Moved(Exception):
    """A guarded answer write found the run written since it was read (nothing written)."""


class RunControl:
    """ResumeRun, CancelRun, InjectInput and StopAfterTurn; mixed into RunManager."""

    deps: Deps
    children: ChildRuns
    _executors: dict[str, tuple[RunExecutor, asyncio.Task[None]]]
    _claiming: set[str]
    #: Per run being resumed here: its lock and the requests holding or awaiting it (resume).
    _resuming: dict[str, tuple[asyncio.Lock, int]]
    #: Start a run's executor in this process (record, lease token, event seq, session seq):
    #: RunManager.spawn.
    spawn: Callable[[RunRecord, int, int, int], None]
    #: Await a coroutine that runs to its end even when the request is cancelled:
    #: RunManager.unabandoned.
    unabandoned: Callable[[Coroutine[Any, Any, None]], Awaitable[None]]

    @property
    def store(self) -> RunStore:
        """The runs store."""
        return self.deps.store

    async def get_run(self, tenant: str, run_id: str) -> RunRecord:
        """Return the tenant's run. Raises INVALID_ARGUMENT (MISSING_FIELD/INVALID_ID), NOT_FOUND."""
        if not run_id:
            raise missing("run_id")
        if not valid_id(run_id):
            raise invalid(Reason.INVALID_ID, "run_id is malformed", field="run_id")
        record = await self.store.get_run(run_id, tenant)
        if record is None:
            raise not_found(Reason.RUN_NOT_FOUND, f"run {run_id!r} not found")
        return record

    async def resume(self, tenant: str, req: Resume) -> RunRecord:
        """Record answers to a suspended run's calls; continue it once every call is answered.

        Answers to one run are taken one request at a time in this process: each reads the
        run, merges its answers into those it read and writes them back, so two requests at
        once (two `agentrt reconcile`, two `approve`) would otherwise both be accepted with
        one's answers lost. Across replicas each write of the answers is guarded by the
        run's last save as read (`expect_marker`, decision 0061): a write that finds the run
        written meanwhile writes nothing, and the answers are read and merged again, so answers
        to different calls all count and a second answer to one call is INVALID_VALUE.

        Raises:
            MeshError: NOT_FOUND/RUN_NOT_FOUND; FAILED_PRECONDITION RUN_FINISHED or
                RUN_NOT_SUSPENDED; INVALID_ARGUMENT MISSING_FIELD (nothing answered) or
                INVALID_VALUE (a call that is not pending, answered twice in one request, or
                already answered by an earlier ResumeRun: an answered call leaves
                `pending_calls` at once); ABORTED/RETRY_CONFLICT when other replicas wrote
                the run first ANSWER_ATTEMPTS times in a row (retry).
        """
        lock, users = self._resuming.get(req.run_id, (asyncio.Lock(), 0))
        self._resuming[req.run_id] = (lock, users + 1)
        try:
            async with lock:
                return await self._resume(tenant, req)
        finally:
            lock, users = self._resuming[req.run_id]
            if users == 1:
                del self._resuming[req.run_id]
            else:
                self._resuming[req.run_id] = (lock, users - 1)

    async def _suspended(self, tenant: str, run_id: str) -> RunRecord:
        """The run as it is now, which must be suspended (FAILED_PRECONDITION otherwise)."""
        record = await self.get_run(tenant, run_id)
        if record.status == cpb.RUN_STATUS_SUSPENDED:
            record = await self.children.refresh(record)  # a child answered on its own meanwhile
        if record.finished:
            raise precondition(Reason.RUN_FINISHED, f"run {run_id!r} has finished")
        if record.status != cpb.RUN_STATUS_SUSPENDED:
            raise precondition(Reason.RUN_NOT_SUSPENDED, f"run {run_id!r} is not suspended")
        return record

    async def _resume(self, tenant: str, req: Resume) -> RunRecord:
        record = await self._suspended(tenant, req.run_id)
        if not req.decisions and not req.results and not req.reconciliations:
            raise missing("decisions, results or reconciliations")
        check_answers(req)
        answers, always = merge_answers(record.pending, record.answers, record.always_approved, req)
        own, forwarded = split(record, req)
        if forwarded:
            # A child's calls are answered in the child (004 §2.2 step 6; decision 0018): each
            # child resumes, then wakes this run once it waits on nothing (child_runs.py).
            for sub in forwarded:
                await self.resume(tenant, sub)
            if own is None:
                return await self.get_run(tenant, req.run_id)
            record, req = await self.get_run(tenant, req.run_id), own
            answers, always = merge_answers(record.pending, record.answers, record.always_approved, req)
        for _ in range(ANSWER_ATTEMPTS):
            done = await self._answer(tenant, record, req, answers, always)
            if done is not None:
                return done
            # Another replica wrote the run since it was read (its own answers, a cancel):
            # read it again and merge again; an answer it took for the same call is now
            # refused (INVALID_VALUE), as on one replica.
            record = await self._suspended(tenant, req.run_id)
            answers, always = merge_answers(record.pending, record.answers, record.always_approved, req)
        raise MeshError(
            Status.ABORTED,
            Reason.RETRY_CONFLICT,
            f"run {req.run_id!r} was answered on another replica at the same time; retry",
            retry_after_seconds=0.1,
        )

    async def _answer(
        self, tenant: str, record: RunRecord, req: Resume, answers: Answers, always: set[str]
    ) -> RunRecord | None:
        """Write the merged answers of a suspended run as read; continue it when all are in.

        Returns:
            The run after the write, or None when the run was written since `record` was read
            (nothing written here; the caller reads it again).
        """
        waiting = {p.call.call_id for p in record.pending}
        answered = answers.answered()
        # An "always" approval answers the turn's other waiting calls of the same tool too.
        answered |= {
            p.call.call_id for p in record.pending
            if p.kind == pb.PENDING_CALL_KIND_APPROVAL and p.call.name in always
        }  # fmt: skip
        changes: dict[str, object] = {"answers": answers, "always_approved": sorted(always)}
        # A call reconciled with RUN_AGAIN runs as a new execution attempt (its own journal
        # record at the tool service): exactly one more run of it. Counted when the answer
        # arrives, also when other calls still wait: a RUN_AGAIN answered before the last
        # answer was otherwise lost (the call kept its attempt, the journal gave back the
        # interruption, and the model read that).
        attempts = dict(record.state.get("attempts", {}))
        for rec in req.reconciliations:
            if rec.action == pb.RECONCILIATION_ACTION_RUN_AGAIN:
                attempts[rec.call_id] = int(attempts.get(rec.call_id, 0)) + 1
        if not waiting <= answered:
            changes["state"] = record.with_state(attempts=attempts)
            # An answered call leaves pending_calls at once: a second answer for it is then
            # refused by merge_answers (INVALID_VALUE), so a denial cannot be overturned.
            changes["pending"] = [p for p in record.pending if p.call.call_id not in answered]
            done = await self.store.save(
                record.run_id,
                changes=changes,
                expect_status=[cpb.RUN_STATUS_SUSPENDED],
                expect_marker=record.update_time_s,
            )
            if done is None:
                return None
            await self.children.sync_parent(await self.get_run(tenant, req.run_id))
            return await self.get_run(tenant, req.run_id)
        state = record.with_state(attempts=attempts, suspension_reason=0)
        try:
            await self.wake(record, changes, state, len(answered), expect_marker=record.update_time_s)
        except _Moved:
            return None
        if record.state.get(PARENT_RUN_ID):
            self.deps.crash("after_child_resumed")  # crash tests: the parent is repaired later
        await self.children.sync_parent(await self.get_run(tenant, req.run_id))
        return await self.get_run(tenant, req.run_id)

    async def wake(
        self,
        record: RunRecord,
        changes: dict[str, object],
        state: dict[str, object],
        answered: int,
        expect_marker: float | None = None,
    ) -> None:
        """Continue a suspended run here: one guarded write (SUSPENDED -> RUNNING), then its executor.

        The write, the lease and the spawn run to their end even when the request is cancelled
        meanwhile (RunManager.unabandoned), so a run leased here always gets its executor.

        Raises:
            MeshError: FAILED_PRECONDITION/RUN_NOT_SUSPENDED when it changed state meanwhile.
            _Moved: with `expect_marker`, the run was written since it was read (nothing written).
        """
        await self.unabandoned(self._wake(record, changes, state, answered, expect_marker))

    async def _wake(
        self,
        record: RunRecord,
        changes: dict[str, object],
        state: dict[str, object],
        answered: int,
        expect_marker: float | None,
    ) -> None:
        resumed = run_resumed_event(record, answered)
        self._claiming.add(record.run_id)
        try:
            stored = await self.store.save(
                record.run_id,
                changes={**changes, "status": cpb.RUN_STATUS_RUNNING, "pending": [], "state": state},
                log=[("resumed", {"turn": record.turns + 1, "answers": answered})],
                new_events=[resumed],
                session=(record.tenant, record.session_id),
                expect_status=[cpb.RUN_STATUS_SUSPENDED],
                expect_marker=expect_marker,
            )
            if stored is None and expect_marker is not None:
                raise _Moved()
            if stored is None:
                raise precondition(Reason.RUN_NOT_SUSPENDED, f"run {record.run_id!r} is not suspended")
            self.deps.hub.deliver(stored)
            await self._claim(record.run_id, stored)
        finally:
            self._claiming.discard(record.run_id)

    async def _claim(self, run_id: str, stored: list[StoredEvent]) -> None:
        token = await self.store.acquire_lease(run_id, self.deps.owner, self.deps.lease_seconds)
        record = await self.store.get_run(run_id) if token is not None else None
        if record is not None and token is not None:
            self.spawn(record, token, stored[-1].seq, stored[-1].session_seq)

    async def cancel(self, tenant: str, run_id: str, reason: str) -> RunRecord:
        """Cancel a run and its unfinished child runs (004 §2.8); see `_cancel_one`.

        A canceled child whose parent waits on it wakes the parent: the call's result says
        the agent's run was canceled.

        Raises:
            MeshError: NOT_FOUND/RUN_NOT_FOUND; FAILED_PRECONDITION/RUN_FINISHED.
        """
        record = await self._cancel_one(tenant, run_id, reason)
        if record.finished:
            await self.children.cancel_children(record, reason)
            await self.children.sync_parent(record)  # a parent suspended on it goes on without it
        return await self.get_run(tenant, run_id)

    async def _cancel_one(self, tenant: str, run_id: str, reason: str) -> RunRecord:
        """Cancel a run; canceled is terminal, not an error (002).

        A run executing here stops at its next wait and records its end before this
        returns; a suspended run, or one whose owner died, is ended here; a run executing
        on another replica gets the request, honoured at that replica's next lease renewal.

        Raises:
            MeshError: NOT_FOUND/RUN_NOT_FOUND; FAILED_PRECONDITION/RUN_FINISHED.
        """
        record = await self.get_run(tenant, run_id)
        if record.finished:
            raise precondition(Reason.RUN_FINISHED, f"run {run_id!r} has finished")
        local = self._executors.get(run_id)
        if local is not None:
            local[0].stop("cancel", reason)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(local[1]), CANCEL_WAIT_S)
            return await self.get_run(tenant, run_id)
        token = None
        if record.status == cpb.RUN_STATUS_RUNNING:
            token = await self.store.acquire_lease(run_id, self.deps.owner, self.deps.lease_seconds)
            if token is None:
                await self.store.save(
                    run_id, changes={"cancel_requested": True, "cancel_reason": reason},
                    expect_status=[cpb.RUN_STATUS_RUNNING],
                )  # fmt: skip
                return await self.get_run(tenant, run_id)
        await self._end_here(record, reason, token)
        return await self.get_run(tenant, run_id)

    async def _end_here(
        self,
        record: RunRecord,
        reason: str,
        token: int | None,
        *,
        status: int = cpb.RUN_STATUS_CANCELED,
        failure: cpb.FailureInfo | None = None,
    ) -> None:
        """End a run no executor drives (suspended, or its owner died): one guarded write.

        Raises:
            MeshError: FAILED_PRECONDITION/RUN_FINISHED when it changed state meanwhile.
        """
        phase = cpb.RUN_PHASE_CANCELED if status == cpb.RUN_STATUS_CANCELED else cpb.RUN_PHASE_FAILED
        # Its unconsumed_input is the queue as the save finds it (settle_unconsumed, below).
        completed = run_completed(record, status, phase, failure=failure)
        failure_text = base64.b64encode(failure.SerializeToString()).decode("ascii") if failure else ""
        ended = run_ended_events(record, completed)
        stored = await self.store.save(
            record.run_id,
            changes={"status": status, "phase": phase, "pending": [], "lease_owner": "",
                     "lease_expires_s": 0.0, "failure": failure,
                     "state": record.with_state(suspension_reason=0)},
            log=[("completed", {"status": status, "failure": failure_text, "reason": reason})],
            new_events=ended,
            session=(record.tenant, record.session_id),
            token=token,
            expect_status=[record.status],
            settle=lambda queue: settle_unconsumed(ended, queue),  # under the row's lock (decision 0058)
        )  # fmt: skip
        if stored is None:
            raise precondition(Reason.RUN_FINISHED, f"run {record.run_id!r} changed state; read it again")
        self.deps.hub.deliver(stored)
        self.deps.releases.start(self.deps.peers, record)

    async def inject(self, tenant: str, req: pb.InjectInputRequest) -> int:
        """Queue input for a live run (004 §2.11b); return its queue position (from 1).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD text, INVALID_VALUE kind);
                NOT_FOUND/RUN_NOT_FOUND; FAILED_PRECONDITION/RUN_FINISHED.
        """
        if not req.text.strip():
            raise missing("text")
        check_text_bytes(req.text, "text")
        kind = _INJECTION_KINDS.get(req.kind)
        if kind is None:
            raise invalid(Reason.INVALID_VALUE, "kind must be STEER, NEXT_TURN or FOLLOW_UP", field="kind")
        record = await self.get_run(tenant, req.run_id)
        position = await self.store.push_input(
            record.run_id, {"id": uuid.uuid4().hex, "kind": kind, "text": req.text}
        )
        if position is None:
            raise precondition(Reason.RUN_FINISHED, f"run {req.run_id!r} has finished")
        return position

    async def stop_after_turn(self, tenant: str, run_id: str, reason: str) -> RunRecord:
        """Ask a run to finish at its next save point (004 §2.3c); return its record.

        The request is queued with the run's input (convert/run.py STOP_KIND), so the save point
        of whichever replica runs it reads it; a suspended run stops at the save point
        after its resume. Asking twice is harmless.

        Raises:
            MeshError: NOT_FOUND/RUN_NOT_FOUND; FAILED_PRECONDITION/RUN_FINISHED.
        """
        record = await self.get_run(tenant, run_id)
        if record.finished:
            raise precondition(Reason.RUN_FINISHED, f"run {run_id!r} has finished")
        item = {"id": uuid.uuid4().hex, "kind": STOP_KIND, "text": reason}
        if await self.store.push_input(record.run_id, item) is None:
            raise precondition(Reason.RUN_FINISHED, f"run {run_id!r} has finished")
        return await self.get_run(tenant, run_id)
