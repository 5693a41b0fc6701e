"""Answers the journal could not record: kept in this process and recorded later (decision 0063).

A keyed call's answer is recorded before it is handed over (journal/calls.py), and the
record is retried through transient store failures (`RECORD_POLICY`). When the store is
still failing after that, the callers get the answer unrecorded, and its row stays PENDING
under this gateway's holder. Left there, the key's next call would ask the provider again:
on this replica (its own PENDING row reads as "an earlier try whose answer was lost"), or on
another once this holder's lease lapsed. So `LateRecords` keeps the answer and, in the
background, renews the row's lease and retries the record until it is written (or
`LATE_RECORD_S` passed, or the process stops), and a call of the key meanwhile is answered
from the kept copy on this replica (`held`) and waits on the live lease on the others.

Bounds: at most `MAX_KEPT` answers (the oldest dropped, its task stopped); each retried for
`LATE_RECORD_S` at most. A process that stops (or is killed) with answers still unrecorded
loses them: their keys are asked again once their leases lapse, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from agentrt.gateway.journal.store import JournalStore

log = logging.getLogger("agentrt.gateway.journal")

#: How long an unrecorded answer is retried, seconds.
LATE_RECORD_S = 300.0
#: Unrecorded answers kept at most (the oldest is dropped beyond).
MAX_KEPT = 1024
#: The first wait before a retry, seconds (doubled up to a third of the lease).
FIRST_RETRY_S = 0.2

Key = tuple[str, str]


class LateRecords:
    """Unrecorded answers of this process and their background records (module docstring)."""

    def __init__(
        self,
        store: JournalStore,
        holder: str,
        lease_s: float,
        clock: Callable[[], float],
        tasks: set[asyncio.Task[None]],
    ) -> None:
        """Keep answers for `store`'s rows held by `holder`; background tasks join `tasks`.

        Args:
            store: the journal's rows.
            holder: this process's holder id (the rows' holder).
            lease_s: the holder's lease, seconds (renewed while a record is retried).
            clock: epoch seconds, as the journal's.
            tasks: the journal's background tasks (its close waits for them, then stops them).
        """
        self._store = store
        self._holder = holder
        self._lease = lease_s
        self._clock = clock
        self._tasks = tasks
        self._kept: OrderedDict[Key, tuple[str, bytes, asyncio.Task[None]]] = OrderedDict()

    def held(self, key: Key, fingerprint: str) -> bytes | None:
        """The kept answer of key for a request of `fingerprint`, None when none is kept."""
        kept = self._kept.get(key)
        if kept is None or kept[0] != fingerprint:
            return None
        return kept[1]

    def __len__(self) -> int:
        """How many answers are kept."""
        return len(self._kept)

    def __contains__(self, key: Key) -> bool:
        """Whether key's answer is kept (the call answered; its record is still being written)."""
        return key in self._kept

    def keep(self, key: Key, fingerprint: str, answer: bytes) -> None:
        """Keep key's answer and record it in the background (once: a second keep is ignored)."""
        if key in self._kept:
            return
        task = asyncio.get_running_loop().create_task(self._record(key, answer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._kept[key] = (fingerprint, answer, task)
        while len(self._kept) > MAX_KEPT:
            dropped, (_, _, oldest) = self._kept.popitem(last=False)
            oldest.cancel()
            log.error("model call %r: its unrecorded answer was dropped (too many kept)", dropped[1])

    async def _record(self, key: Key, answer: bytes) -> None:
        tenant, name = key
        wait = FIRST_RETRY_S
        give_up = time.monotonic() + LATE_RECORD_S
        try:
            while time.monotonic() < give_up:
                await asyncio.sleep(wait)
                wait = min(wait * 2, self._lease / 3)
                try:
                    # Keep the row's lease, so other replicas wait for the record rather than
                    # ask again; then record (a PENDING row of any holder takes it).
                    await self._store.renew(tenant, name, self._holder, self._clock() + self._lease)
                    await self._store.finish(tenant, name, answer, self._clock())
                except Exception as exc:  # noqa: BLE001 - tried again until give_up
                    log.warning("model call %r: recording its answer failed again: %s", name, exc)
                    continue
                log.info("model call %r: its answer is recorded (late)", name)
                return
            log.error("model call %r: its answer could not be recorded in %gs", name, LATE_RECORD_S)
        finally:
            kept = self._kept.get(key)
            if kept is not None and kept[2] is asyncio.current_task():
                del self._kept[key]
