"""The adaptive input-token limiter the gateway calls (seed 002 "Model Client Throughput").

`AdaptiveTokenLimiter` applies the rules of rules.py over a `LimiterStore`: the in-process
one (memory.py, the embedded default), PostgreSQL (postgres.py) or Redis (redis.py), the
last two shared by every gateway replica. It owns the waiting (polling the store, with
jitter, until the request fits or its wait ends) and when a request is refused
(refusals.py builds the errors); the store owns the state and makes each step atomic.
`build_limiter` picks the store by config. The package re-exports its names with those of
rules.py.

Every call into the store is bounded (`LimiterSettings.store_timeout_seconds`), and a
reservation attempt also by what is left of the request's admission wait (never less than
`MIN_ATTEMPT_SECONDS`), so a store that accepts connections but never answers costs a
caller its wait, not a minute. A store that answers late is a wait, not a failure: an
attempt that times out is tried again, with the same entry id, while the admission wait
lasts (a store that already admitted the entry, its answer lost, answers admitted again;
the Redis and memory stores never hold it twice either). Once the wait is over, the
request is refused: RESOURCE_EXHAUSTED/RATE_LIMITED when the store answered at least once
(its budget was spent), UNAVAILABLE/DEPENDENCY_UNAVAILABLE (retryable) when it never did.
An attempt abandoned this way may still have been admitted by the store (the answer was
lost): its entry counts until it leaves the window, which errs on the side of the budget.
A store that fails (not reachable, an error) fails the request at once, as before.

A store whose methods never suspend (its own class declares `inline = True`: the in-process
one; a subclass, which may override them, does not inherit it) is called without those
bounds: it cannot be late, and a timer per call is a cost of every model call.

`snapshot()` is this replica's view for metrics: each bucket as of its latest reservation
attempt here, with the view's age. Once a whole span (window + guard) has passed since that
attempt, every entry it counted has left the window, so used and pending read 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from agentrt.core.errors import MeshError
from agentrt.gateway.limiter.refusals import OverBudget, refusal, spent, unavailable
from agentrt.gateway.limiter.rules import (
    BACKENDS,
    DEFAULT_TENANT,
    Attempt,
    BucketState,
    LimiterKey,
    LimiterSettings,
    LimiterStore,
    Reservation,
)

log = logging.getLogger("agentrt.gateway")

#: The least time a reservation attempt is given, even when less of its wait is left, in seconds.
MIN_ATTEMPT_SECONDS = 0.5
#: Buckets of (tenant, provider, model) remembered per limiter (beyond it, computed each time).
_BUCKET_CACHE_ENTRIES = 4096


class TokenLimiter(Protocol):
    """What the gateway needs from a limiter."""

    @property
    def exact_count(self) -> bool:
        """Whether requests are counted with the provider's endpoint where one exists."""
        ...

    async def reserve(self, key: LimiterKey, tokens: int, max_wait_seconds: float) -> Reservation:
        """Hold `tokens` input tokens, waiting at most max_wait_seconds for them.

        Raises:
            OverBudget: RESOURCE_EXHAUSTED/RATE_LIMITED, tokens exceed the budget.
            MeshError: RESOURCE_EXHAUSTED/RATE_LIMITED with retry_after_seconds when the
                tokens cannot be had within max_wait_seconds; UNAVAILABLE/DEPENDENCY_UNAVAILABLE
                when the store cannot be reached.
        """
        ...

    async def settle(self, reservation: Reservation, input_tokens: int | None) -> None:
        """Correct the reservation with the input tokens the provider reported (None: keep it)."""
        ...

    async def record_outcome(self, key: LimiterKey, *, rate_limited: bool) -> None:
        """Tell the limiter how a call ended (backs off on throttling, probes on success)."""
        ...


@dataclass
class AdaptiveTokenLimiter:
    """The limiter over one store (see the module docstring).

    Attributes:
        store: where the state lives.
        settings: the rules' figures.
        clock: monotonic clock for this caller's wait, in seconds (injectable for tests).
        sleep: how to wait (injectable for tests).
        rand: jitter source in [0, 1) for poll intervals (injectable for tests).
    """

    store: LimiterStore
    settings: LimiterSettings = field(default_factory=LimiterSettings)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    _seen: dict[str, BucketState] = field(default_factory=dict, init=False, repr=False)
    _seen_at: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _buckets: dict[LimiterKey, str] = field(default_factory=dict, init=False, repr=False)
    #: Entry ids: unique per limiter (a random prefix) and per reservation (a counter).
    _ids: Callable[[], int] = field(
        default_factory=lambda: itertools.count().__next__, init=False, repr=False
    )
    _prefix: str = field(default_factory=lambda: uuid.uuid4().hex, init=False, repr=False)

    def _bounded(self, seconds: float) -> contextlib.AbstractAsyncContextManager[object]:
        """A timeout of `seconds` around a store call; none for a store that never suspends."""
        if type(self.store).__dict__.get("inline", False):
            return contextlib.nullcontext()
        return asyncio.timeout(seconds)

    def _bucket(self, key: LimiterKey) -> str:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self.settings.bucket(key)
            if len(self._buckets) < _BUCKET_CACHE_ENTRIES:
                self._buckets[key] = bucket
        return bucket

    @property
    def exact_count(self) -> bool:
        """See TokenLimiter.exact_count."""
        return self.settings.exact_count

    async def prepare(self) -> None:
        """Prepare the store (migrations on PostgreSQL)."""
        await self.store.prepare()

    async def close(self) -> None:
        """Close the store."""
        await self.store.close()

    async def reserve(self, key: LimiterKey, tokens: int, max_wait_seconds: float) -> Reservation:
        """Hold `tokens` input tokens (>= 0) for key, waiting at most max_wait_seconds.

        Each store attempt is bounded by the store timeout and by what is left of
        max_wait_seconds (at least MIN_ATTEMPT_SECONDS), see the module docstring.

        Raises:
            OverBudget: RESOURCE_EXHAUSTED/RATE_LIMITED: tokens exceed the bucket's current
                budget (RetryInfo: one window) or its maximum (no RetryInfo: never fits).
            MeshError: RESOURCE_EXHAUSTED/RATE_LIMITED with retry_after_seconds (the
                earliest the tokens could fit) when they cannot be had in time;
                UNAVAILABLE/DEPENDENCY_UNAVAILABLE (RetryInfo 1 s) when the store cannot be
                reached or does not answer in time.
        """
        s = self.settings
        tokens = max(0, int(tokens))
        bucket = self._bucket(key)
        if tokens > s.max_tokens:
            raise refusal(
                s,
                key,
                tokens,
                s.max_tokens,
                None,
                OverBudget,
                f"can never be admitted: it needs {tokens} input tokens, more than the maximum "
                f"budget of {s.max_tokens} per {s.window_seconds:g} s",
            )
        start = self.clock()
        deadline = start + max(0.0, max_wait_seconds)
        entry_id = f"{self._prefix}{self._ids():x}"
        last: Attempt | None = None
        late = 0
        while True:
            left = deadline - self.clock()
            bound = min(s.store_timeout_seconds, max(left, MIN_ATTEMPT_SECONDS))
            try:
                attempt = await self._attempt(key, bucket, entry_id, tokens, bound)
            except TimeoutError as exc:
                late += 1
                if deadline - self.clock() > 0:
                    # A slow store is a wait, not a failure: try again (same entry id, so an
                    # attempt whose answer was lost is not counted twice) while the wait lasts.
                    continue
                if last is not None:
                    # The store answered before; what ran out is this request's wait.
                    raise spent(s, key, tokens, last, max_wait_seconds) from exc
                raise unavailable(
                    f"did not answer within the {max(0.0, max_wait_seconds):g} s admission wait "
                    f"({late} attempt{'' if late == 1 else 's'} of up to {bound:g} s)"
                ) from exc
            last = attempt
            if attempt.admitted:
                return Reservation(key, tokens, self.clock() - start, bucket, entry_id)
            if tokens > attempt.budget_tokens:
                raise refusal(
                    s,
                    key,
                    tokens,
                    attempt.budget_tokens,
                    s.window_seconds,
                    OverBudget,
                    f"needs {tokens} input tokens, more than the current budget of "
                    f"{attempt.budget_tokens} per {s.window_seconds:g} s"
                    + (
                        " (lowered after provider throttling)"
                        if attempt.budget_tokens < s.initial_tokens
                        else ""
                    )
                    + f"; budgets rise by probing up to {s.max_tokens}",
                )
            remaining = deadline - self.clock()
            if attempt.wait_seconds > remaining or remaining <= 0:
                raise spent(s, key, tokens, attempt, max_wait_seconds)
            pause = max(attempt.wait_seconds, s.poll_seconds * 0.5) + self.rand() * s.poll_seconds
            await self.sleep(min(remaining, pause))

    async def settle(self, reservation: Reservation, input_tokens: int | None) -> None:
        """Rewrite the reservation's entry with the reported input tokens (None: keep it).

        Never raises: a store failure is logged (the entry then keeps its reservation).
        """
        tokens = None if input_tokens is None else max(0, int(input_tokens))
        try:
            async with self._bounded(self.settings.store_timeout_seconds):
                await self.store.settle(reservation.bucket, reservation.entry_id, tokens)
        except Exception:  # noqa: BLE001 - the call is over; the entry keeps its reserved size
            log.warning("limiter settle failed for %s", reservation.bucket, exc_info=True)
            return
        seen = self._seen.get(reservation.bucket)
        if seen is not None:  # keep the metrics' view in step: the entry now holds `tokens`
            used = seen.used_tokens - reservation.tokens + (reservation.tokens if tokens is None else tokens)
            self._seen[reservation.bucket] = _changed(
                seen, used=max(0, used), pending=max(0, seen.pending_tokens - reservation.tokens)
            )

    async def record_outcome(self, key: LimiterKey, *, rate_limited: bool) -> None:
        """Halve the key's budget on throttling, probe upward on success (see `adapt`).

        Never raises: a store failure is logged.
        """
        bucket = self._bucket(key)
        try:
            async with self._bounded(self.settings.store_timeout_seconds):
                budget = await self.store.outcome(bucket, rate_limited)
        except Exception:  # noqa: BLE001 - adaptation is best effort
            log.warning("limiter outcome failed for %s", bucket, exc_info=True)
            return
        seen = self._seen.get(bucket)
        if seen is not None and seen.budget_tokens != budget:
            self._seen[bucket] = _changed(seen, budget=budget)

    async def state(self, key: LimiterKey) -> BucketState:
        """Read key's bucket from the store now.

        Raises:
            TimeoutError: the store did not answer within the store timeout.
            Exception: whatever the store raises when it cannot be reached.
        """
        bucket = self.settings.bucket(key)
        async with asyncio.timeout(self.settings.store_timeout_seconds):
            budget, used, pending = await self.store.read(bucket)
        return self._state(key, bucket, budget, used, pending)

    def snapshot(self) -> list[BucketState]:
        """Return this replica's view of every bucket it has used, sorted by bucket key.

        Synchronous and cheap (no store access), for metrics scraped off the event loop:
        the budget as of the latest attempt or outcome here; used and pending tokens as of
        the latest reservation attempt here, `age_seconds` ago, and 0 once a whole span has
        passed since (every entry that attempt counted has left the window by then).
        """
        now, span = self.clock(), self.settings.span_seconds
        out: list[BucketState] = []
        for bucket, state in sorted(list(self._seen.items())):
            age = max(0.0, now - self._seen_at.get(bucket, now))
            if age >= span:
                state = dataclasses.replace(state, used_tokens=0, pending_tokens=0)
            out.append(dataclasses.replace(state, age_seconds=age))
        return out

    def _state(self, key: LimiterKey, bucket: str, budget: int, used: int, pending: int) -> BucketState:
        s = self.settings
        tenant = (key.tenant or DEFAULT_TENANT) if s.per_tenant else ""
        return BucketState(
            bucket, key.provider, s.family(key.model), tenant, budget, used, pending, s.window_seconds
        )

    async def _attempt(
        self, key: LimiterKey, bucket: str, entry_id: str, tokens: int, bound: float
    ) -> Attempt:
        # TimeoutError (bound passed) goes to the caller, which knows whether the wait or
        # the store is to blame; any other store failure fails closed.
        try:
            async with self._bounded(bound):
                attempt = await self.store.try_reserve(bucket, entry_id, tokens)
        except MeshError:
            raise
        except TimeoutError:
            log.warning("limiter store did not answer within %g s for %s", bound, bucket)
            raise
        except Exception as exc:  # noqa: BLE001 - fail closed: without the store no budget holds
            log.warning("limiter store unreachable for %s", bucket, exc_info=True)
            raise unavailable(f"is unreachable ({type(exc).__name__})") from exc
        used = attempt.used_tokens + (tokens if attempt.admitted else 0)
        pending = attempt.pending_tokens + (tokens if attempt.admitted else 0)
        self._seen[bucket] = self._state(key, bucket, attempt.budget_tokens, used, pending)
        self._seen_at[bucket] = self.clock()
        return attempt


def _changed(
    seen: BucketState, *, budget: int | None = None, used: int | None = None, pending: int | None = None
) -> BucketState:
    """Return seen with the given figures replaced (dataclasses.replace without its introspection)."""
    return BucketState(
        seen.bucket,
        seen.provider,
        seen.family,
        seen.tenant,
        seen.budget_tokens if budget is None else budget,
        seen.used_tokens if used is None else used,
        seen.pending_tokens if pending is None else pending,
        seen.window_seconds,
        seen.age_seconds,
    )


def build_limiter(
    backend: str, url: str, settings: LimiterSettings, *, pool_size: int = 10, max_overflow: int = 10
) -> AdaptiveTokenLimiter:
    """Return the limiter over the configured store (nothing connects until first use).

    Args:
        backend: "memory", "postgres" (url: postgresql+asyncpg://...) or "redis" (url: redis://...).
        url: the shared store's URL ("" for memory).
        settings: the rules' figures.
        pool_size: PostgreSQL connections the store keeps open (the server passes
            AGENTRT_DB_POOL_SIZE); unused by the other stores.
        max_overflow: PostgreSQL connections opened beyond pool_size under load
            (AGENTRT_DB_MAX_OVERFLOW).

    Raises:
        ValueError: an unknown backend.
    """
    if backend == "memory":
        from agentrt.gateway.limiter.memory import MemoryStore

        return AdaptiveTokenLimiter(MemoryStore(settings), settings)
    if backend == "postgres":
        from agentrt.gateway.limiter.postgres import PostgresStore

        return AdaptiveTokenLimiter(
            PostgresStore(url, settings, pool_size=pool_size, max_overflow=max_overflow), settings
        )
    if backend == "redis":
        from agentrt.gateway.limiter.redis import RedisStore

        return AdaptiveTokenLimiter(RedisStore(url, settings), settings)
    raise ValueError(f"unknown limiter backend {backend!r}; use one of {', '.join(BACKENDS)}")
