"""Retries of retryable provider errors: capped exponential backoff with jitter.

A retryable error (rate limit, overload, 5xx, connection failure) is retried at most
`max_retries` times. Each delay is the backoff for that attempt (doubling from
`initial_backoff_seconds`, capped at `max_backoff_seconds`, with jitter between half and
all of it), or the provider's Retry-After when that is longer. A retry that could not
finish before the caller's deadline is not attempted, and a Retry-After beyond
`max_retry_after_seconds` is not waited for: the error goes back to the caller with its
RetryInfo instead. Every retry is logged as a diagnostic (004 §2.11d) and marked as a
zero-duration `model_retry` event on the current span, the call's CLIENT span (004 §2.11e).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from agentrt.gateway.errors import ProviderError
from agentrt.mesh.telemetry import record_model_retry

log = logging.getLogger("agentrt.gateway")

T = TypeVar("T")

#: Called with each error about to be retried, in the retrying task's context. The servicer
#: sets it per call so that its metrics count retries by tenant (metrics.py).
retry_observer: ContextVar[Callable[[ProviderError], None] | None] = ContextVar(
    "agentrt_gateway_retry_observer", default=None
)


@dataclass(frozen=True)
class RetryPolicy:
    """How provider errors are retried.

    Attributes:
        max_retries: retries after the first attempt (0 disables retrying).
        initial_backoff_seconds: delay before the first retry, in seconds.
        max_backoff_seconds: cap on one backoff delay, in seconds.
        max_retry_after_seconds: the longest Retry-After honored, in seconds.
    """

    max_retries: int = 2
    initial_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 8.0
    max_retry_after_seconds: float = 60.0

    def delay(
        self, retry: int, retry_after: float | None, rand: Callable[[], float] = random.random
    ) -> float:
        """Return the delay before retry number `retry` (from 1), in seconds."""
        backoff = min(self.max_backoff_seconds, self.initial_backoff_seconds * (2 ** (retry - 1)))
        jittered = backoff * (0.5 + rand() / 2)
        return max(jittered, retry_after or 0.0)


@dataclass(frozen=True)
class RetryContext:
    """Who is calling, for the retry diagnostics.

    Attributes:
        provider: provider key.
        model: model id.
        run_id: the run making the call ("" when unknown).
    """

    provider: str
    model: str
    run_id: str = ""


def next_delay(
    err: ProviderError,
    retries: int,
    policy: RetryPolicy,
    deadline: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> float | None:
    """Return the delay before the next retry, in seconds, or None when err must not be retried.

    Args:
        err: the failure.
        retries: retries already made.
        policy: the retry policy.
        deadline: the caller's deadline on `clock`, or None.
        clock: monotonic clock in seconds.
    """
    if not err.retryable or retries >= policy.max_retries:
        return None
    if err.retry_after_seconds is not None and err.retry_after_seconds > policy.max_retry_after_seconds:
        return None
    delay = policy.delay(retries + 1, err.retry_after_seconds)
    if deadline is not None and clock() + delay >= deadline:
        return None
    return delay


def log_retry(err: ProviderError, retry: int, delay: float, policy: RetryPolicy, where: RetryContext) -> None:
    """Log one retry as a diagnostic (004 §2.11d) and mark it on the current span (004 §2.11e)."""
    log.warning(
        "gateway retry %d/%d after %s in %.2fs (provider=%s model=%s run=%s): %s",
        retry,
        policy.max_retries,
        err.reason,
        delay,
        where.provider,
        where.model,
        where.run_id,
        err.message,
        extra={
            "diagnostic": "provider_retry",
            "provider": where.provider,
            "model": where.model,
            "run_id": where.run_id,
            "reason": str(err.reason),
            "attempt": retry,
            "delay_seconds": delay,
        },
    )
    record_model_retry(attempt=retry, reason=str(err.reason).lower(), delay_seconds=delay)
    observer = retry_observer.get()
    if observer is not None:
        observer(err)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    deadline: float | None,
    where: RetryContext,
    *,
    on_retry: Callable[[ProviderError], Awaitable[None]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[T, int]:
    """Run attempt, retrying retryable ProviderErrors; return (result, retries made).

    Args:
        attempt: one provider call; raises ProviderError on failure.
        policy: the retry policy.
        deadline: the caller's deadline on `clock` (seconds), or None for none.
        where: provider/model/run for diagnostics.
        on_retry: awaited with each error that is about to be retried (limiter feedback).
        clock: monotonic clock in seconds.
        sleep: how to wait.

    Raises:
        ProviderError: the last error, when it is not retryable, retries are spent, the
            deadline leaves no room, or the provider asks for too long a wait.
    """
    retries = 0
    while True:
        try:
            return await attempt(), retries
        except ProviderError as err:
            delay = next_delay(err, retries, policy, deadline, clock)
            if delay is None:
                raise
            retries += 1
            log_retry(err, retries, delay, policy, where)
            if on_retry is not None:
                await on_retry(err)
            await sleep(delay)
