"""The adaptive input-token limiter the gateway calls (seed 002 "Model Client Throughput").

`AdaptiveTokenLimiter` applies the rules of limiter_rules.py over a `LimiterStore`: the
in-process one (limiter_memory.py, the embedded default), PostgreSQL (limiter_pg.py) or
Redis (limiter_redis.py), the last two shared by every gateway replica. It owns the waiting
(polling the store, with jitter, until the request fits or its wait ends) and the errors;
the store owns the state and makes each step atomic. `build_limiter` picks the store by
config. The names of limiter_rules.py are re-exported here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.gateway.limiter_rules import (
    BACKENDS,
    Attempt,
    BucketState,
    LimiterKey,
    LimiterSettings,
    LimiterStore,
    Reservation,
    adapt,
    admission_wait,
    parse_families,
)

__all__ = [
    "BACKENDS",
    "AdaptiveTokenLimiter",
    "Attempt",
    "BucketState",
    "LimiterKey",
    "LimiterSettings",
    "LimiterStore",
    "OverBudget",
    "Reservation",
    "TokenLimiter",
    "adapt",
    "admission_wait",
    "build_limiter",
    "parse_families",
]

log = logging.getLogger("agentrt.gateway")


class OverBudget(MeshError):
    """A request larger than its bucket's current (or maximum) budget."""


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

        Raises:
            OverBudget: RESOURCE_EXHAUSTED/RATE_LIMITED: tokens exceed the bucket's current
                budget (RetryInfo: one window) or its maximum (no RetryInfo: never fits).
            MeshError: RESOURCE_EXHAUSTED/RATE_LIMITED with retry_after_seconds (the
                earliest the tokens could fit) when they cannot be had in time;
                UNAVAILABLE/DEPENDENCY_UNAVAILABLE when the store cannot be reached.
        """
        s = self.settings
        tokens = max(0, int(tokens))
        bucket = s.bucket(key)
        if tokens > s.max_tokens:
            raise self._refusal(
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
        entry_id = uuid.uuid4().hex
        while True:
            attempt = await self._attempt(key, bucket, entry_id, tokens)
            if attempt.admitted:
                return Reservation(key, tokens, self.clock() - start, bucket, entry_id)
            if tokens > attempt.budget_tokens:
                raise self._refusal(
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
                raise self._refusal(
                    key,
                    tokens,
                    attempt.budget_tokens,
                    max(attempt.wait_seconds, s.poll_seconds),
                    MeshError,
                    f"input-token budget of {attempt.budget_tokens} per {s.window_seconds:g} s is spent; "
                    f"{tokens} tokens do not fit within the {max(0.0, max_wait_seconds):g} s admission wait",
                )
            pause = max(attempt.wait_seconds, s.poll_seconds * 0.5) + self.rand() * s.poll_seconds
            await self.sleep(min(remaining, pause))

    async def settle(self, reservation: Reservation, input_tokens: int | None) -> None:
        """Rewrite the reservation's entry with the reported input tokens (None: keep it).

        Never raises: a store failure is logged (the entry then keeps its reservation).
        """
        tokens = None if input_tokens is None else max(0, int(input_tokens))
        try:
            await self.store.settle(reservation.bucket, reservation.entry_id, tokens)
        except Exception:  # noqa: BLE001 - the call is over; the entry keeps its reserved size
            log.warning("limiter settle failed for %s", reservation.bucket, exc_info=True)
            return
        seen = self._seen.get(reservation.bucket)
        if seen is not None:  # keep the metrics' view in step: the entry now holds `tokens`
            used = seen.used_tokens - reservation.tokens + (reservation.tokens if tokens is None else tokens)
            self._seen[reservation.bucket] = dataclasses.replace(
                seen,
                used_tokens=max(0, used),
                pending_tokens=max(0, seen.pending_tokens - reservation.tokens),
            )

    async def record_outcome(self, key: LimiterKey, *, rate_limited: bool) -> None:
        """Halve the key's budget on throttling, probe upward on success (see `adapt`).

        Never raises: a store failure is logged.
        """
        bucket = self.settings.bucket(key)
        try:
            budget = await self.store.outcome(bucket, rate_limited)
        except Exception:  # noqa: BLE001 - adaptation is best effort
            log.warning("limiter outcome failed for %s", bucket, exc_info=True)
            return
        seen = self._seen.get(bucket)
        if seen is not None:
            self._seen[bucket] = dataclasses.replace(seen, budget_tokens=budget)

    async def state(self, key: LimiterKey) -> BucketState:
        """Read key's bucket from the store now.

        Raises:
            Exception: whatever the store raises when it cannot be reached.
        """
        bucket = self.settings.bucket(key)
        budget, used, pending = await self.store.read(bucket)
        return self._state(key, bucket, budget, used, pending)

    def snapshot(self) -> list[BucketState]:
        """Return the last-known state of every bucket this process has used, by bucket key.

        Synchronous and cheap (no store access): budgets and usage as of this replica's
        latest reservation attempt or outcome, for metrics scraped off the event loop.
        """
        return [self._seen[b] for b in sorted(self._seen)]

    def _state(self, key: LimiterKey, bucket: str, budget: int, used: int, pending: int) -> BucketState:
        s = self.settings
        tenant = key.tenant if s.per_tenant else ""
        return BucketState(
            bucket, key.provider, s.family(key.model), tenant, budget, used, pending, s.window_seconds
        )

    async def _attempt(self, key: LimiterKey, bucket: str, entry_id: str, tokens: int) -> Attempt:
        try:
            attempt = await self.store.try_reserve(bucket, entry_id, tokens)
        except MeshError:
            raise
        except Exception as exc:  # noqa: BLE001 - fail closed: without the store no budget holds
            log.warning("limiter store unreachable for %s", bucket, exc_info=True)
            raise MeshError(
                Status.UNAVAILABLE,
                Reason.DEPENDENCY_UNAVAILABLE,
                f"the rate-limit store is unreachable ({type(exc).__name__}); try again",
                {"limiter": "gateway"},
                retry_after_seconds=1.0,
            ) from exc
        used = attempt.used_tokens + (tokens if attempt.admitted else 0)
        pending = attempt.pending_tokens + (tokens if attempt.admitted else 0)
        self._seen[bucket] = self._state(key, bucket, attempt.budget_tokens, used, pending)
        return attempt

    def _refusal(
        self,
        key: LimiterKey,
        tokens: int,
        budget: int,
        retry_after: float | None,
        kind: type[MeshError],
        detail: str,
    ) -> MeshError:
        family = self.settings.family(key.model)
        return kind(
            Status.RESOURCE_EXHAUSTED,
            Reason.RATE_LIMITED,
            f"gateway input-token limit of {key.provider}:{family}: the request {detail}",
            {
                "limiter": "gateway",
                "provider": key.provider,
                "model_family": family,
                "requested_tokens": str(tokens),
                "budget_tokens": str(budget),
                "window_seconds": f"{self.settings.window_seconds:g}",
            },
            retry_after_seconds=retry_after,
        )


def build_limiter(backend: str, url: str, settings: LimiterSettings) -> AdaptiveTokenLimiter:
    """Return the limiter over the configured store (nothing connects until first use).

    Args:
        backend: "memory", "postgres" (url: postgresql+asyncpg://...) or "redis" (url: redis://...).
        url: the shared store's URL ("" for memory).
        settings: the rules' figures.

    Raises:
        ValueError: an unknown backend.
    """
    if backend == "memory":
        from agentrt.gateway.limiter_memory import MemoryStore

        return AdaptiveTokenLimiter(MemoryStore(settings), settings)
    if backend == "postgres":
        from agentrt.gateway.limiter_pg import PostgresStore

        return AdaptiveTokenLimiter(PostgresStore(url, settings), settings)
    if backend == "redis":
        from agentrt.gateway.limiter_redis import RedisStore

        return AdaptiveTokenLimiter(RedisStore(url, settings), settings)
    raise ValueError(f"unknown limiter backend {backend!r}; use one of {', '.join(BACKENDS)}")
