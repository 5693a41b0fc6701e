"""The execution journal as one process sees it: the records, and the calls in flight here.

Owns answering a call from what is already known about its key (the idempotency path):
a FINISHED record answers every repeat; a call in flight in this process is joined; a
STARTED record whose owner is gone (a dead process on this host, or no heartbeat for
three periods) is closed as INTERRUPTED (SERVICE_STOPPED); one still heartbeating
elsewhere answers ABORTED/EXECUTION_IN_PROGRESS with a retry delay. Also the heartbeat of
a running call (which sees a cancel asked for on another process) and CancelExecution's
side of the records. A different call under a used key is refused (CALL_ID_REUSED) and
changes nothing. The protocol as a whole is in executor.py's module docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agentrt.core.errors import MeshError, Reason, Status, invalid
from agentrt.tools.calls.results import Outcome, interrupted, not_executed
from agentrt.tools.execution.flight import Flight, NotRun
from agentrt.tools.execution.request import Emit
from agentrt.tools.identity import owner_dead
from agentrt.tools.storage.store import FINISHED, STARTED, CallKey, ExecRecord, ToolStore, utcnow

log = logging.getLogger("agentrt.tools")


def _reused() -> MeshError:
    return invalid(
        Reason.CALL_ID_REUSED,
        "call_id was already used for a different call in this run",
        field="call.call_id",
    )


class Journal:
    """The journal's records (`store`) and the calls in flight in this process (`inflight`)."""

    def __init__(self, store: ToolStore, owner: str, heartbeat_seconds: float) -> None:
        """Journal as owner (this process's identity), heartbeating every heartbeat_seconds (> 0)."""
        self.store = store
        self.owner = owner
        self.heartbeat_seconds = heartbeat_seconds
        self.inflight: dict[CallKey, Flight] = {}

    async def finish(self, key: CallKey, outcome: Outcome) -> None:
        """Close the STARTED record of a call this process ran with its outcome (FINISHED)."""
        if not await self.store.finish(key, self.owner, outcome):
            log.warning(
                "call %s/%s finished after its record was closed by another process", key.run_id, key.call_id
            )

    async def join(self, key: CallKey, fp: str, emit: Emit | None) -> Outcome:
        """Listen to the call in flight here under key, or, when it never ran, answer from its record.

        Raises:
            MeshError: INVALID_ARGUMENT/CALL_ID_REUSED (another call under the key), what ended
                the flight, UNAVAILABLE/SANDBOX_UNAVAILABLE (the attempt joined could not run),
                or see `answer_from`.
        """
        flight = self.inflight[key]
        if flight.fingerprint != fp:
            raise _reused()
        try:
            return await flight.result(emit)
        except NotRun:
            pass
        # The attempt we joined did not run (refused, or lost the race to another process).
        record = await self.store.get(key)
        if record is not None:
            return await self.answer_from(record, fp, emit)
        raise MeshError(
            Status.UNAVAILABLE,
            Reason.SANDBOX_UNAVAILABLE,
            "the concurrent attempt of this call could not run; retry",
            retry_after_seconds=1.0,
        )

    async def answer_from(self, record: ExecRecord, fp: str, emit: Emit | None = None) -> Outcome:
        """Answer a call from its record: its outcome, a flight to join, or an orphan closed here.

        Raises:
            MeshError: INVALID_ARGUMENT/CALL_ID_REUSED; ABORTED/EXECUTION_IN_PROGRESS (with a
                retry delay of one heartbeat) while another process still runs it.
        """
        # A tombstone (a cancel that came before the call) has no fingerprint: any call matches.
        if record.fingerprint and record.fingerprint != fp:
            raise _reused()
        if record.state == FINISHED and record.outcome is not None:
            return record.outcome
        stale = 3 * self.heartbeat_seconds
        age = (utcnow() - record.heartbeat_at).total_seconds()
        if record.key in self.inflight:
            return await self.join(record.key, fp, emit)
        if record.owner == self.owner or owner_dead(record.owner) or age > stale:
            ended = interrupted("the tool service stopped while it ran", "SERVICE_STOPPED")
            window = -1.0 if age <= stale else stale  # a dead owner needs no waiting
            if await self.store.claim_orphan(record.key, record.owner, window, ended):
                return ended
            again = await self.store.get(record.key)
            if again is not None and again.state == FINISHED and again.outcome is not None:
                return again.outcome
        raise MeshError(
            Status.ABORTED,
            Reason.EXECUTION_IN_PROGRESS,
            "the call is running in another tool service process; retry later",
            retry_after_seconds=self.heartbeat_seconds,
        )

    async def heartbeat(self, key: CallKey, flight: Flight) -> None:
        """Refresh the record every period while the call runs; kill it when a cancel was asked for."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                asked = await self.store.heartbeat(key, self.owner)
            except Exception:  # noqa: BLE001 - a missed beat only ages the record
                log.warning("heartbeat of %s/%s failed", key.run_id, key.call_id, exc_info=True)
                continue
            if asked and not flight.cancel_reason:
                flight.cancel("it was cancelled by request")

    async def state(self, key: CallKey) -> tuple[str, Outcome | None]:
        """(state, outcome) of key's record as it stands: "absent", "started" or "finished"."""
        record = await self.store.get(key)
        if record is None:
            return "absent", None
        return (FINISHED, record.outcome) if record.state == FINISHED else (STARTED, None)

    async def cancel(self, key: CallKey, why: str) -> tuple[str, Outcome | None]:
        """Kill the call under key, or make sure it never starts; see `ToolExecutor.cancel_execution`."""
        flight = self.inflight.get(key)
        if flight is not None:
            # Running here: killed and journaled INTERRUPTED. Not running yet (its STARTED
            # record being written, or its task before its first step): it ends unrun,
            # journaled NOT_EXECUTED, or, when it lost its STARTED insert, is looked up below.
            flight.cancel(why)
            with contextlib.suppress(Exception):
                await flight.result(None)
        record = await self.store.get(key)
        if record is None:
            tombstone = not_executed(why)
            if await self.store.record(key, "", "", self.owner, tombstone):
                return FINISHED, tombstone
            record = await self.store.get(key)
        if record is None:
            return "absent", None
        if record.state == FINISHED:
            return FINISHED, record.outcome
        age = (utcnow() - record.heartbeat_at).total_seconds()
        if owner_dead(record.owner) or age > 3 * self.heartbeat_seconds:
            ended = interrupted(why, "CALLER_CANCELLED")
            if await self.store.claim_orphan(key, record.owner, -1.0, ended):
                return FINISHED, ended
        await self.store.request_cancel(key)
        return STARTED, None
