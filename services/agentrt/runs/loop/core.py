"""The executor's foundation: its record, lease token, event channel and fenced writes.

`ExecutorCore` holds what every phase of a run's executor uses (runs/loop/executor.py composes
them): the run record, the fencing token, the event channel (runs/events/channel.py), the
copy of the session's context view, and the one way to record a transition, `_save` (run row,
run log and events in one fenced transaction; held events go out after the commit). A
write that finds the token stale raises `LeaseLost`: another replica owns the run.
Stops (cancel, shutdown, lease lost) interrupt waits on peers only (`_interruptible`).
What every executor of the process shares is `Deps` (runs/loop/deps.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from typing import Any

from agentrt.runs.convert.run import injected_only
from agentrt.runs.domain import MAX_DIAGNOSTICS, RunRecord, diagnostic_out
from agentrt.runs.events.build import NOT_CONSUMED, not_consumed_message, run_completed, settle_unconsumed
from agentrt.runs.loop.compaction import Compactor
from agentrt.runs.loop.context_cache import ContextCache, TailReadAhead
from agentrt.runs.loop.deps import Deps
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

log = logging.getLogger("agentrt.runs")

_TERMINAL_PHASE = {
    cpb.RUN_STATUS_COMPLETED: cpb.RUN_PHASE_COMPLETED,
    cpb.RUN_STATUS_FAILED: cpb.RUN_PHASE_FAILED,
    cpb.RUN_STATUS_CANCELED: cpb.RUN_PHASE_CANCELED,
}


class LeaseLost(Exception):
    """A fenced write found another owner's token: stop without acting."""


class Interrupted(Exception):
    """A stop was requested (cancel, shutdown, lease lost) while the run waited on a peer."""


def b64(msg: Any) -> str:
    """Return a protobuf message as base64 text (how the run log keeps them)."""
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


class ExecutorCore:
    """State and fenced writes of one run's executor (see the module docstring)."""

    def __init__(self, deps: Deps, record: RunRecord, token: int, seq: int, session_seq: int) -> None:
        """Open the run's event channel, numbering after (seq, session_seq)."""
        self.deps = deps
        self.r = record
        self.token = token
        self.channel = deps.hub.open(
            record.run_id,
            record.tenant,
            record.session_id,
            seq,
            session_seq,
            reserved=record.event_seq_reserved,
            extend=self._extend,
        )
        self.stop_reason = ""
        self.cancel_message = ""
        #: The terminal status once `_finish` ran (0 while the run has not ended here).
        self.ended = 0
        self.turn = record.turns
        self._stopping = asyncio.Event()
        #: Set by a stop other than "shutdown" (cancel, lease lost): what a model call in
        #: flight yields to (a shutdown lets it finish, see `_interruptible`).
        self._halting = asyncio.Event()
        #: Log entries (and their run-row changes) recorded but not written yet: they ride
        #: on the next save, which always comes before anything acts on them (see _defer).
        self._deferred_log: list[tuple[str, dict[str, Any]]] = []
        self._deferred_changes: dict[str, Any] = {}
        #: The session's context view as this executor last read or wrote it.
        self._context = ContextCache()
        #: The next turn's tail read, begun when a batch was written.
        self._tail_ahead = TailReadAhead()
        #: (session seq, active leaf) the turn's request was built from.
        self._request_at: tuple[int, str | None] = (record.session_last_seq, None)
        #: Diagnostics not yet on a session batch (they ride on the next one's last entry).
        self._unbatched: list[dict[str, Any]] = []
        self.compactor = Compactor(deps.peers, record.agent, record.tenant, record.run_id)
        self._last_usage: cpb.Usage | None = None
        #: The run's sandbox id once this executor created or adopted it (runs/lifecycle/sandboxes.py).
        self._sandbox_id: str | None = None
        #: How many times this executor had it created or adopted; the lock serializes asking.
        self._sandbox_asks = 0
        self._sandbox_lock = asyncio.Lock()
        self._bytes_since = 0

    def stop(self, reason: str, message: str = "") -> None:
        """Ask the run to stop at its next wait: "cancel", "shutdown" or "lease_lost".

        Only waits on peers (the model call, tool execution) are interrupted; a database
        write in progress always completes, so the log and the events stay consistent.
        """
        if not self.stop_reason:
            self.stop_reason, self.cancel_message = reason, message
        self._stopping.set()
        if reason != "shutdown":
            self._halting.set()

    async def _extend(self, seq: int, session_seq: int) -> bool:
        return await self.deps.store.reserve(self.r.run_id, self.token, seq, session_seq)

    async def _interruptible(self, awaitable: Any, *, finish_on_shutdown: bool = False) -> Any:
        """Await a wait on a peer unless a stop comes first (then raise Interrupted).

        With finish_on_shutdown (the model call), a wait already in flight when a
        "shutdown" stop arrives is let finish (the drain's grace bounds it), so its response
        is logged before the lease is handed over and the next owner never asks again; a
        cancel or a lost lease still interrupts it. No new wait starts once any stop came.
        """
        if self._stopping.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise Interrupted()
        task = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future((self._halting if finish_on_shutdown else self._stopping).wait())
        try:
            done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
        if task in done:
            return task.result()
        with contextlib.suppress(BaseException):
            await task
        raise Interrupted()

    def _publish(self, **payload: Any) -> None:
        self.channel.publish(self.turn, **payload)

    def _phase(self, phase: int) -> None:
        if self.r.phase != phase:
            self.r.phase = phase
            self._publish(phase_changed=pb.PhaseChanged(phase=phase))  # type: ignore[arg-type]

    def _defer(self, kind: str, payload: dict[str, Any], **changes: Any) -> None:
        """Record a transition to be written by the next `_save`, in the same transaction.

        Only for a transition nothing outside this process acts on before the next save
        point: the model's response of a turn that goes on to its tool phase (written with
        tools_started/suspended, before any tool runs), and a tool phase's results (written
        with the turn's save point; a takeover in between re-sends the calls and the tool
        service answers from its journal). The changes apply to the in-memory record now.
        """
        self._deferred_log.append((kind, payload))
        self._deferred_changes.update(changes)
        for name, value in changes.items():
            setattr(self.r, name, value)

    def _diagnose(self, code: str, message: str, **details: Any) -> None:
        """Record trouble the run survived (004 §2.11d): an event, the Run, the next batch, a log line."""
        log.info("diagnostic %s: %s", code, message, extra={"diagnostic": code})
        d = pb.Diagnostic(
            code=code, message=message, turn=self.turn, details_json=json.dumps(details) if details else ""
        )
        self._publish(diagnostic=d)
        kept = [*self.r.state.get("diagnostics", []), diagnostic_out(d)][-MAX_DIAGNOSTICS:]
        self._defer_state(diagnostics=kept)
        self._unbatched.append(diagnostic_out(d))

    def _defer_state(self, **values: Any) -> None:
        self.r.state = self.r.with_state(**values)
        self._deferred_changes["state"] = self.r.state

    async def _save(self, kind: str, payload: dict[str, Any], *, final: bool = False, **changes: Any) -> None:
        """Write a transition: run row changes, log entries, the events so far; one transaction.

        Deferred transitions (see `_defer`) are written first, in order. Events held until
        a write are delivered after the commit. The event reservation moves a block past
        the last seq, or stops at it when `final` (suspended, ended: nothing provisional
        follows, so a later owner's seqs continue without a gap).
        """
        drop = changes.pop("_drop_inputs", ())
        ending = changes.pop("_ending", False)  # the run's end: report its queue as of the commit
        events = self.channel.take()
        reserved, session_reserved = (
            (self.channel.seq, self.channel.session_seq) if final else self.channel.reservation()
        )
        changes = {
            **self._deferred_changes,
            **changes,
            "event_seq_reserved": reserved,
            "session_seq_reserved": session_reserved,
        }
        changes.setdefault("phase", self.r.phase)
        done = await self.deps.store.save(
            self.r.run_id,
            changes=changes,
            log=[*self._deferred_log, (kind, payload)],
            events=events,
            token=self.token,
            drop_inputs=drop,
            settle=(lambda queue: settle_unconsumed([e.event for e in events], queue)) if ending else None,
        )
        if done is None:
            raise LeaseLost()
        self._deferred_log, self._deferred_changes = [], {}
        for name, value in changes.items():
            setattr(self.r, name, value)
        self.channel.flushed(events, reserved)

    async def _hand_over(self) -> None:
        """Shutdown: write what was delivered but not stored, then give the lease up."""
        with contextlib.suppress(Exception):
            events = self.channel.take()
            await self.deps.store.save(
                self.r.run_id,
                changes={
                    "event_seq_reserved": self.channel.seq,
                    "session_seq_reserved": self.channel.session_seq,
                },
                events=events,
                token=self.token,
            )
        await self.deps.store.release_lease(self.r.run_id, self.token)

    async def _hand_over_quietly(self) -> None:
        """`_hand_over` for a run cancelled by the drain: a failure is logged, never raised."""
        try:
            await self._hand_over()
            log.info("run %s: handed over at the drain's deadline (a wait outlasted it)", self.r.run_id)
        except Exception:  # noqa: BLE001 - the lease then expires; another replica takes it then
            log.exception("run %s: could not release its lease at the drain's deadline", self.r.run_id)

    # -- the loop --------------------------------------------------------------------------

    async def _read_context(self) -> list[spb.Entry]:
        """Return the session's context view (the copy brought up to date, or a full read).

        The copy is extended from the log's tail (one ListEntries after the known seq);
        with no copy, or a tail that could change it, the whole view is read (GetContext).
        The tail read begun when this executor's last batch was written (`_wrote`) is used
        when the copy has not changed since; one that failed is read again here, so its
        error surfaces from this call.
        """
        r, cache = self.r, self._context
        if cache.loaded:
            tail_and_seq = await self._tail_ahead.take(cache)
            if tail_and_seq is None:
                tail_and_seq = await self.deps.peers.tail(r.tenant, r.session_id, cache.last_seq)
            tail, last_seq = tail_and_seq
            if cache.extend(tail, last_seq):
                return cache.entries()
        entries, last_seq, leaf = await self.deps.peers.context(r.tenant, r.session_id)
        cache.reset(entries, last_seq, leaf)
        return cache.entries()

    def _read_tail_ahead(self) -> None:
        """Begin the next turn's tail read now, beside the save point that follows a batch.

        The batch is written, so the read sees at least what the save point records; the
        save point and the read go to two services and have no order between them, and the
        next model call waits for both (docs/decisions/0017-hot-path.md).
        """
        r = self.r
        self._tail_ahead.begin(self._context, lambda seq: self.deps.peers.tail(r.tenant, r.session_id, seq))

    def _wrote(
        self,
        stored: list[spb.Entry] | None,
        tail: tuple[list[spb.Entry], int] | None = None,
        *,
        read_ahead: bool = True,
    ) -> None:
        """Extend the cached view with a batch as stored (None: not known, drop the copy).

        Then the next turn's tail: the one the append answered as of its commit (`tail`,
        AppendEntries include_tail, decision 0057), else a read begun now (`_read_tail_ahead`); none when
        `read_ahead` is False (a finishing turn: a next turn reads for itself).
        """
        if stored is None:
            self._context.drop()
            self._tail_ahead.drop()
            return
        self._context.extend(stored)
        if tail is not None:
            self._tail_ahead.given(self._context, tail)
        elif read_ahead:
            self._read_tail_ahead()
        else:
            self._tail_ahead.drop()

    async def _suspend(self, turn: int, pending: list[pb.PendingCall], reason: int) -> None:
        self._publish(run_suspended=pb.RunSuspended(pending_calls=pending, reason=reason))  # type: ignore[arg-type]
        self._defer_state(suspension_reason=reason)
        await self._save(
            "suspended",
            {"turn": turn, "pending": [p.call.call_id for p in pending], "reason": reason},
            final=True,
            status=cpb.RUN_STATUS_SUSPENDED,
            pending=pending,
            lease_owner="",
            lease_expires_s=0.0,
        )

    async def _finish(
        self, status: int, *, final_output: str = "", failure: cpb.FailureInfo | None = None
    ) -> None:
        r = self.r
        self._tail_ahead.drop()
        phase = _TERMINAL_PHASE[status]  # type: ignore[index]
        left = injected_only(await self.deps.store.pending_input(r.run_id))
        if left:
            self._diagnose(NOT_CONSUMED, not_consumed_message(len(left)), ids=[i.get("id") for i in left])
        completed = run_completed(
            r, status, phase, final_output=final_output, unconsumed=left, failure=failure
        )
        self.turn = 0
        self._publish(run_completed=completed)
        self._publish(stream_end=pb.StreamEnd(status=status))  # type: ignore[arg-type]
        self.r.phase = phase
        payload = {
            "status": status,
            "failure": b64(failure) if failure else "",
            "reason": self.cancel_message,
        }
        await self._save(
            "completed",
            payload,
            final=True,
            status=status,
            final_output=final_output,
            failure=failure,
            pending=[],
            lease_owner="",
            lease_expires_s=0.0,
            _ending=True,  # input accepted since the read above is reported too (settle_unconsumed)
        )
        self.ended = status
        self.deps.releases.start(self.deps.peers, r)

    async def _end_quietly(self, status: int, *, failure: cpb.FailureInfo | None = None) -> None:
        try:
            await self._finish(status, failure=failure)
        except LeaseLost:
            log.info("run %s: lease lost before it could end", self.r.run_id)
        except Exception:  # noqa: BLE001 - the run stays RUNNING and is taken over later
            log.exception("run %s: could not record its end", self.r.run_id)
