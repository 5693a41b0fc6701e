"""The input-token limiter seam (seed 002 "Model Client Throughput & Rate Limiting").

Every model call reserves its estimated input tokens before it is sent and settles with
the provider's reported usage afterwards. `TokenLimiter` is the interface the gateway
calls; `InProcessTokenLimiter` is the simple implementation of this release: one token
bucket per key (tenant, provider, model) in this process, with a generous budget.

The adaptive, cluster-wide limiter (issue 4: budget shared by all gateway replicas, backing
off on provider throttling and probing upward on success) implements the same interface
and is swapped in at `build_server`; `record_outcome` is the hook it needs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from agentrt.core.errors import MeshError, Reason, Status


@dataclass(frozen=True)
class LimiterKey:
    """What a budget is kept for.

    Attributes:
        tenant: the tenant charged ("" = default).
        provider: provider key, e.g. "openai".
        model: the provider's model id.
    """

    tenant: str
    provider: str
    model: str


@dataclass(frozen=True)
class Reservation:
    """Tokens held for one call.

    Attributes:
        key: the budget they came from.
        tokens: input tokens reserved (an estimate).
        waited_seconds: how long admission waited, in seconds.
    """

    key: LimiterKey
    tokens: int
    waited_seconds: float


class TokenLimiter(Protocol):
    """What the gateway needs from a limiter."""

    async def reserve(self, key: LimiterKey, tokens: int, max_wait_seconds: float) -> Reservation:
        """Hold `tokens` input tokens, waiting at most max_wait_seconds for them.

        Raises:
            MeshError: RESOURCE_EXHAUSTED/RATE_LIMITED with retry_after_seconds when the
                tokens cannot be had within max_wait_seconds.
        """
        ...

    async def settle(self, reservation: Reservation, input_tokens: int | None) -> None:
        """Correct the reservation with the input tokens the provider reported (None: keep it)."""
        ...

    async def record_outcome(self, key: LimiterKey, *, rate_limited: bool) -> None:
        """Tell the limiter how a call ended (an adaptive limiter backs off on throttling)."""
        ...


class InProcessTokenLimiter:
    """A token bucket per key, refilled continuously at tokens_per_minute.

    Admission takes the tokens at once (the balance may go negative) and waits for the
    debt to refill, so waiting callers are served in arrival order without a lock held
    across the wait. A single request larger than the whole budget is admitted when the
    bucket is full rather than never.
    """

    def __init__(
        self,
        tokens_per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Create the limiter.

        Args:
            tokens_per_minute: budget per key, in input tokens per minute (> 0).
            clock: monotonic clock in seconds (injectable for tests).
            sleep: how to wait (injectable for tests).
        """
        self._capacity = float(max(1, tokens_per_minute))
        self._rate = self._capacity / 60.0
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[LimiterKey, tuple[float, float]] = {}

    def available(self, key: LimiterKey) -> float:
        """Return the tokens available to key now (negative while in debt)."""
        return self._refill(key)

    def _refill(self, key: LimiterKey) -> float:
        now = self._clock()
        balance, at = self._buckets.get(key, (self._capacity, now))
        balance = min(self._capacity, balance + (now - at) * self._rate)
        self._buckets[key] = (balance, now)
        return balance

    async def reserve(self, key: LimiterKey, tokens: int, max_wait_seconds: float) -> Reservation:
        """See TokenLimiter.reserve."""
        need = min(float(max(0, tokens)), self._capacity)
        balance = self._refill(key)
        wait = max(0.0, (need - balance) / self._rate)
        if wait > max_wait_seconds:
            raise MeshError(
                Status.RESOURCE_EXHAUSTED,
                Reason.RATE_LIMITED,
                f"input-token budget of {key.provider}:{key.model} is spent; admission needs {wait:.1f}s",
                {"provider": key.provider, "model": key.model},
                retry_after_seconds=wait,
            )
        self._buckets[key] = (balance - need, self._clock())
        if wait > 0:
            await self._sleep(wait)
        return Reservation(key, int(need), wait)

    async def settle(self, reservation: Reservation, input_tokens: int | None) -> None:
        """See TokenLimiter.settle."""
        if input_tokens is None:
            return
        balance = self._refill(reservation.key)
        corrected = min(self._capacity, balance + reservation.tokens - input_tokens)
        self._buckets[reservation.key] = (corrected, self._clock())

    async def record_outcome(self, key: LimiterKey, *, rate_limited: bool) -> None:
        """See TokenLimiter.record_outcome; the fixed budget ignores outcomes."""


def estimate_tokens(request_bytes: int) -> int:
    """Estimate input tokens from a request's size: about four bytes per token."""
    return max(1, request_bytes // 4)
