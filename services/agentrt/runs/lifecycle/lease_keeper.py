"""Lease renewal from a task of its own (issue 13: a starved replica must not lose its runs).

The replica's leases (one per run it executes, `RunStore.renew_leases`, guarded by owner and
fencing token) are renewed every third of the lease by `LeaseKeeper.run`, a task that does
nothing else: the takeover scan, the suspended-run budget check and the store gauges run in
the manager's housekeeping loop, so a slow scan never delays a renewal. A renewal that meets
a transient database failure is retried at once (mesh/storage/transient.py, three tries within about
a second) instead of waiting for the next period.

A late renewal (the event loop or the whole process was starved, or stopped) is not taken on
trust: the guarded UPDATE says which leases are still this replica's (same owner, same
token), and the runs whose lease was taken over meanwhile are stopped without acting (their
next fenced write would be refused anyway). When renewals keep failing for longer than a
lease, this replica can no longer know it holds any lease: its runs are stopped ("lease_lost")
and left to the takeover scan of whichever replica reaches the database first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from agentrt.mesh.storage.transient import RetryPolicy, retry_transient
from agentrt.runs.storage.store import RunStore

log = logging.getLogger("agentrt.runs")

#: Quick retries of one renewal through a transient database failure.
RENEW_POLICY = RetryPolicy(attempts=3, first_delay_s=0.1, max_delay_s=0.5)


class LeaseKeeper:
    """Renews the leases of the runs this replica executes (see the module docstring)."""

    def __init__(
        self,
        store: RunStore,
        owner: str,
        lease_s: float,
        tokens: Callable[[], dict[str, int]],
        stop: Callable[[str, str], None],
        canceled: Callable[[set[str]], Awaitable[None]],
    ) -> None:
        """Keep owner's leases of lease_s seconds.

        Args:
            store: the runs store.
            owner: this replica's lease owner id.
            lease_s: the lease, seconds; renewed every third of it.
            tokens: the fencing token of each run executing here now (run id -> token).
            stop: stop a local run without acting: (run id, reason).
            canceled: honour cancellations requested elsewhere (the run ids).
        """
        self._store = store
        self._owner = owner
        self._lease = lease_s
        self._tokens = tokens
        self._stop = stop
        self._canceled = canceled
        self.period_s = max(lease_s / 3, 0.05)
        #: Monotonic time of the last renewal the database confirmed.
        self.last_ok = time.monotonic()

    async def run(self) -> None:
        """Renew until cancelled."""
        while True:
            await asyncio.sleep(self.period_s)
            await self.renew_once()

    async def renew_once(self) -> None:
        """One renewal: extend the leases still ours, stop the runs whose lease is not."""
        started = time.monotonic()
        gap = started - self.last_ok
        if gap > 2 * self.period_s:
            # Late renewals lose leases: a starved event loop, a stopped process, a slow pool.
            log.warning(
                "runs: leases renewed %.1fs after the previous renewal (expected every %.1fs, lease %.1fs)%s",
                gap,
                self.period_s,
                self._lease,
                "; past the lease: the fencing tokens decide which runs are still ours"
                if gap > self._lease
                else "",
            )
        tokens = self._tokens()
        try:
            lost, canceled = await retry_transient(
                lambda: self._store.renew_leases(self._owner, tokens, self._lease),
                what="lease renewal",
                policy=RENEW_POLICY,
            )
        except Exception:  # noqa: BLE001 - the keeper outlives a database outage
            log.exception("lease renewal failed")
            if time.monotonic() - self.last_ok > self._lease:
                for run_id in tokens:
                    self._stop(run_id, "lease_lost")
                if tokens:
                    log.error(
                        "runs: no lease renewal for more than the lease (%.1fs): %d local run(s) stopped "
                        "for a takeover",
                        self._lease,
                        len(tokens),
                    )
            return
        self.last_ok = started
        for run_id in lost:
            self._stop(run_id, "lease_lost")
        if canceled - lost:
            await self._canceled(canceled - lost)
