"""The in-process limiter store: the embedded default (one gateway process).

The reference implementation of the rules in rules.py: a bucket is a budget, the time of
its last halving, and its log of entries in admission order (a dict keeps insertion
order, and the clock is monotonic, so the oldest entry is always first) with running sums
of used and pending tokens. Every method runs without awaiting anything, so each is atomic
on the event loop. The clock is injectable so the rules can be tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrt.gateway.limiter.rules import Attempt, LimiterSettings, adapt, admission_wait


@dataclass
class _Entry:
    at: float
    tokens: int
    settled: bool = False


@dataclass
class _Bucket:
    budget: int
    backoff_at: float | None = None
    entries: dict[str, _Entry] = field(default_factory=dict)
    used: int = 0
    pending: int = 0


class MemoryStore:
    """Budgets and logs in this process (see the module docstring)."""

    #: Its methods never suspend: the limiter calls them without a timeout (adaptive.py; a
    #: subclass does not inherit this, it is read from the store's own class).
    inline = True

    def __init__(self, settings: LimiterSettings, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an empty store.

        Args:
            settings: the rules' figures.
            clock: monotonic clock in seconds (injectable for tests).
        """
        self._settings = settings
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    async def prepare(self) -> None:
        """Nothing to prepare."""

    async def close(self) -> None:
        """Nothing to release."""

    def _bucket(self, bucket: str, now: float) -> _Bucket:
        b = self._buckets.get(bucket)
        if b is None:
            b = self._buckets[bucket] = _Bucket(self._settings.initial_tokens)
        horizon = now - self._settings.span_seconds
        while b.entries:
            entry_id, entry = next(iter(b.entries.items()))
            if entry.at > horizon:
                break
            del b.entries[entry_id]
            b.used -= entry.tokens
            if not entry.settled:
                b.pending -= entry.tokens
        return b

    async def try_reserve(self, bucket: str, entry_id: str, tokens: int) -> Attempt:
        """See LimiterStore.try_reserve."""
        now = self._clock()
        b = self._bucket(bucket, now)
        if entry_id in b.entries:  # a repeat of an admitted attempt: counted once
            return Attempt(True, b.budget, b.used, b.pending)
        if tokens > b.budget:
            return Attempt(False, b.budget, b.used, b.pending)
        if b.used + tokens <= b.budget:
            attempt = Attempt(True, b.budget, b.used, b.pending)
            b.entries[entry_id] = _Entry(now, tokens)
            b.used += tokens
            b.pending += tokens
            return attempt
        log = [(e.at, e.tokens, e.settled) for e in b.entries.values()]
        wait = admission_wait(log, tokens, b.budget, self._settings.span_seconds, now)
        return Attempt(False, b.budget, b.used, b.pending, wait)

    async def settle(self, bucket: str, entry_id: str, tokens: int | None) -> None:
        """See LimiterStore.settle."""
        b = self._bucket(bucket, self._clock())
        entry = b.entries.get(entry_id)
        if entry is None or entry.settled:
            return
        new = entry.tokens if tokens is None else tokens
        b.pending -= entry.tokens
        b.used += new - entry.tokens
        entry.tokens, entry.settled = new, True

    async def outcome(self, bucket: str, rate_limited: bool) -> int:
        """See LimiterStore.outcome."""
        now = self._clock()
        b = self._bucket(bucket, now)
        b.budget, b.backoff_at = adapt(b.budget, b.backoff_at, now, rate_limited, self._settings)
        return b.budget

    async def read(self, bucket: str) -> tuple[int, int, int]:
        """See LimiterStore.read."""
        b = self._bucket(bucket, self._clock())
        return b.budget, b.used, b.pending
