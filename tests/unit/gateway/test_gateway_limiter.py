"""The in-process token limiter with a fake clock (no sleeps)."""

from __future__ import annotations

import pytest

from agentrt.core.errors import MeshError
from agentrt.gateway.limiter import InProcessTokenLimiter, LimiterKey, estimate_tokens

KEY = LimiterKey("t", "openai", "m")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_admits_within_budget_then_waits_for_the_debt():
    clock = Clock()
    limiter = InProcessTokenLimiter(600, clock=clock, sleep=clock.sleep)  # 10 tokens per second
    first = await limiter.reserve(KEY, 500, max_wait_seconds=0)
    assert first.waited_seconds == 0 and clock.slept == []
    second = await limiter.reserve(KEY, 200, max_wait_seconds=60)
    assert second.waited_seconds == pytest.approx(10.0) and clock.slept == [pytest.approx(10.0)]


async def test_refuses_when_the_wait_exceeds_the_callers_limit():
    clock = Clock()
    limiter = InProcessTokenLimiter(600, clock=clock, sleep=clock.sleep)
    await limiter.reserve(KEY, 600, max_wait_seconds=0)
    with pytest.raises(MeshError) as info:
        await limiter.reserve(KEY, 100, max_wait_seconds=1)
    assert info.value.reason == "RATE_LIMITED" and info.value.retry_after_seconds == pytest.approx(10.0)
    assert limiter.available(KEY) == pytest.approx(0.0)  # a refusal takes nothing


async def test_settle_refunds_what_was_not_used_and_keys_are_separate():
    clock = Clock()
    limiter = InProcessTokenLimiter(600, clock=clock, sleep=clock.sleep)
    reservation = await limiter.reserve(KEY, 400, max_wait_seconds=0)
    await limiter.settle(reservation, 100)
    assert limiter.available(KEY) == pytest.approx(500.0)
    assert limiter.available(LimiterKey("other", "openai", "m")) == pytest.approx(600.0)
    # larger than the budget: capped, not starved
    big = await limiter.reserve(KEY, 10_000, max_wait_seconds=60)
    assert big.tokens == 600
    assert estimate_tokens(4000) == 1000
