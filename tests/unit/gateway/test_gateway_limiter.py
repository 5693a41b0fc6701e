"""The limiter's rules on the in-process store, with an injected clock (no sleeps).

The store-timeout cases at the end run on the event loop's real clock (a fraction of a
second each): the bound on a store call is the loop's.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.core.errors import MeshError
from agentrt.gateway.limiter import (
    AdaptiveTokenLimiter,
    LimiterKey,
    LimiterSettings,
    OverBudget,
    adapt,
    admission_wait,
    parse_families,
)
from agentrt.gateway.limiter.adaptive import MIN_ATTEMPT_SECONDS
from agentrt.gateway.limiter.memory import MemoryStore
from agentrt.gateway.metrics import ALL_TENANTS, limiter_gauges

KEY = LimiterKey("t", "openai", "gpt-4.1")


class Clock:
    """A fake monotonic clock; sleeping advances it (and may run a hook first)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self.on_sleep = None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.on_sleep is not None:
            await self.on_sleep()
        self.now += seconds


def make(clock: Clock, **kw: object) -> AdaptiveTokenLimiter:
    figures: dict = {
        "initial_tokens": 1000,
        "max_tokens": 2000,
        "floor_tokens": 100,
        "window_seconds": 60.0,
        "guard_seconds": 0.0,
        "cooldown_seconds": 5.0,
        "probe_fraction": 0.05,
        "poll_seconds": 0.1,
    }
    figures.update(kw)
    s = LimiterSettings(**figures)
    return AdaptiveTokenLimiter(MemoryStore(s, clock), s, clock=clock, sleep=clock.sleep, rand=lambda: 0.0)


async def test_admits_up_to_the_budget_then_waits_for_the_window():
    clock = Clock()
    limiter = make(clock)
    first = await limiter.reserve(KEY, 700, max_wait_seconds=0)
    await limiter.settle(first, 700)
    assert first.waited_seconds == 0 and clock.slept == []
    clock.now += 10
    second = await limiter.reserve(KEY, 300, max_wait_seconds=0)  # exactly the budget
    await limiter.settle(second, 300)
    clock.now += 10
    third = await limiter.reserve(KEY, 200, max_wait_seconds=60)
    # fits once the first entry (t=1000) leaves the 60 s window: at t=1060, 40 s from now
    assert third.waited_seconds == pytest.approx(40.0)
    assert clock.now == pytest.approx(1060.0)


async def test_refuses_at_once_with_retry_info_when_the_wait_exceeds_the_callers_limit():
    clock = Clock()
    limiter = make(clock)
    await limiter.settle(await limiter.reserve(KEY, 900, 0), 900)
    clock.now += 20
    with pytest.raises(MeshError) as info:
        await limiter.reserve(KEY, 200, max_wait_seconds=30)
    err = info.value
    assert (err.status, err.reason) == ("RESOURCE_EXHAUSTED", "RATE_LIMITED")
    assert err.retry_after_seconds == pytest.approx(40.0) and clock.slept == []
    assert err.metadata["limiter"] == "gateway" and err.metadata["budget_tokens"] == "1000"
    assert not isinstance(err, OverBudget)
    assert (await limiter.state(KEY)).used_tokens == 900  # a refusal takes nothing


async def test_larger_than_the_budget_fails_at_once_and_larger_than_the_max_can_never_fit():
    clock = Clock()
    limiter = make(clock)
    with pytest.raises(OverBudget) as over:
        await limiter.reserve(KEY, 1500, max_wait_seconds=600)
    assert over.value.retry_after_seconds == 60.0 and "current budget of 1000" in over.value.message
    with pytest.raises(OverBudget) as never:
        await limiter.reserve(KEY, 2001, max_wait_seconds=600)
    assert never.value.retry_after_seconds is None and "can never be admitted" in never.value.message
    assert clock.slept == [] and (await limiter.state(KEY)).used_tokens == 0


async def test_settle_corrects_the_entry_and_none_keeps_the_reservation():
    clock = Clock()
    limiter = make(clock)
    big = await limiter.reserve(KEY, 800, 0)  # an upper bound...
    await limiter.settle(big, 150)  # ...the provider counted 150
    kept = await limiter.reserve(KEY, 300, 0)
    await limiter.settle(kept, None)
    state = await limiter.state(KEY)
    assert (state.used_tokens, state.pending_tokens) == (450, 0)
    await limiter.settle(big, 999)  # a second settle of one entry changes nothing
    assert (await limiter.state(KEY)).used_tokens == 450
    clock.now += 61
    await limiter.settle(kept, 5)  # settled after it left the window: nothing to correct
    assert (await limiter.state(KEY)).used_tokens == 0


async def test_a_waiter_blocked_only_by_an_in_flight_reservation_polls_and_gets_in_after_its_settle():
    clock = Clock()
    limiter = make(clock)
    in_flight = await limiter.reserve(KEY, 900, 0)  # an upper bound, not yet settled

    async def provider_answers() -> None:
        await limiter.settle(in_flight, 100)

    clock.on_sleep = provider_answers
    waiter = await limiter.reserve(KEY, 500, max_wait_seconds=5)
    assert clock.slept == [pytest.approx(0.05)]  # half a poll: the wait was unknown, not 60 s
    assert waiter.waited_seconds == pytest.approx(0.05)
    assert (await limiter.state(KEY)).used_tokens == 600


async def test_the_guard_extends_how_long_an_entry_counts():
    clock = Clock()
    limiter = make(clock, guard_seconds=2.0)
    await limiter.settle(await limiter.reserve(KEY, 1000, 0), 1000)
    clock.now += 60.5  # outside the window, inside window + guard
    with pytest.raises(MeshError) as info:
        await limiter.reserve(KEY, 1, 0)
    assert info.value.retry_after_seconds == pytest.approx(1.5)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.floats(0, 20), st.sampled_from([0.0, 0.5, 1.0, 29.5, 30.0, 59.5])),  # gap, s
            st.integers(1, 600),  # tokens reserved (an upper bound)
            st.floats(0.1, 1.0),  # the share of them the provider reported
            st.sampled_from([0.0, 5.0, 90.0]),  # max wait
        ),
        max_size=60,
    )
)
async def test_never_admits_more_than_the_budget_in_any_window(requests):
    clock = Clock()
    limiter = make(clock, initial_tokens=1000, max_tokens=1000, floor_tokens=1000)
    admitted: list[tuple[float, int]] = []
    for gap, tokens, share, wait in requests:
        clock.now += gap
        try:
            reservation = await limiter.reserve(KEY, tokens, wait)
        except MeshError:
            continue
        used = max(1, int(tokens * share))
        await limiter.settle(reservation, used)
        admitted.append((clock.now, used))
    # Every window of 60 s ending at an admission holds at most the budget.
    for end, _ in admitted:
        assert sum(n for t, n in admitted if end - 60 < t <= end) <= 1000


async def test_halves_on_throttling_once_per_cooldown_and_not_below_the_floor():
    clock = Clock()
    limiter = make(clock)
    for _ in range(5):  # a burst of 429s: one episode
        await limiter.record_outcome(KEY, rate_limited=True)
    assert (await limiter.state(KEY)).budget_tokens == 500
    for expected in (250, 125, 100, 100):
        clock.now += 5
        await limiter.record_outcome(KEY, rate_limited=True)
        assert (await limiter.state(KEY)).budget_tokens == expected


async def test_probes_upward_on_success_after_the_cooldown_and_clamps_at_the_max():
    clock = Clock()
    limiter = make(clock)
    await limiter.record_outcome(KEY, rate_limited=True)
    await limiter.record_outcome(KEY, rate_limited=False)  # inside the cooldown: no probe
    assert (await limiter.state(KEY)).budget_tokens == 500
    clock.now += 5
    for _ in range(4):
        await limiter.record_outcome(KEY, rate_limited=False)  # +5% of 2000 each
    assert (await limiter.state(KEY)).budget_tokens == 900
    for _ in range(100):
        await limiter.record_outcome(KEY, rate_limited=False)
    assert (await limiter.state(KEY)).budget_tokens == 2000
    # the raised budget admits what the initial one refused
    assert (await limiter.reserve(KEY, 1500, 0)).tokens == 1500


async def test_a_lowered_budget_refuses_what_no_longer_fits_and_retries_after_a_window():
    clock = Clock()
    limiter = make(clock)
    await limiter.record_outcome(KEY, rate_limited=True)
    with pytest.raises(OverBudget) as info:
        await limiter.reserve(KEY, 600, max_wait_seconds=60)
    assert (
        info.value.retry_after_seconds == 60.0 and "lowered after provider throttling" in info.value.message
    )


async def test_buckets_are_provider_and_family_and_optionally_tenant():
    clock = Clock()
    families = parse_families("gpt-4.1*=gpt-4.1, claude-*=claude")
    shared = make(clock, families=families)
    await shared.reserve(LimiterKey("a", "openai", "gpt-4.1-mini"), 1000, 0)
    with pytest.raises(MeshError):  # same family, other tenant: one budget
        await shared.reserve(LimiterKey("b", "openai", "gpt-4.1"), 1, 0)
    await shared.reserve(LimiterKey("a", "openai", "o3"), 1000, 0)  # another family
    await shared.reserve(LimiterKey("a", "anthropic", "gpt-4.1"), 1000, 0)  # another provider
    per_tenant = make(clock, families=families, per_tenant=True)
    await per_tenant.reserve(LimiterKey("a", "openai", "gpt-4.1-mini"), 1000, 0)
    await per_tenant.reserve(LimiterKey("b", "openai", "gpt-4.1"), 1000, 0)
    states = {(s.tenant, s.family): s.used_tokens for s in per_tenant.snapshot()}
    assert states == {("a", "gpt-4.1"): 1000, ("b", "gpt-4.1"): 1000}


def test_adapt_and_admission_wait_are_the_rules():
    s = LimiterSettings(initial_tokens=1000, max_tokens=1000, floor_tokens=300, cooldown_seconds=5)
    assert adapt(1000, None, 10.0, True, s) == (500, 10.0)
    assert adapt(500, 10.0, 12.0, True, s) == (500, 10.0)
    assert adapt(500, 10.0, 15.0, True, s) == (300, 15.0)
    assert adapt(990, 10.0, 15.0, False, s) == (1000, 10.0)
    log = [(0.0, 400, True), (1.0, 300, False), (2.0, 200, True)]
    assert admission_wait(log, 100, 1000, 60.0, 30.0) == 0.0  # only the in-flight 300 is in the way
    assert admission_wait(log, 500, 1000, 60.0, 30.0) == pytest.approx(30.0)  # the 400 at t=0 must go
    assert admission_wait(log, 900, 1000, 60.0, 30.0) == pytest.approx(32.0)  # and the 200 at t=2


@pytest.mark.parametrize(
    ("figures", "words"),
    [
        ({"initial_tokens": 100, "floor_tokens": 200}, "floor=200 initial=100"),
        ({"initial_tokens": 5_000_000}, "initial <= max"),
        ({"window_seconds": 0}, "window must be > 0"),
        ({"probe_fraction": 0}, "probe fraction"),
    ],
)
def test_settings_that_disagree_are_refused(figures, words):
    with pytest.raises(ValueError, match=words):
        LimiterSettings(**figures)


def test_families_parse_in_order_and_reject_malformed_entries():
    s = LimiterSettings(families=parse_families("gpt-4.1-mini=mini,gpt-4.1*=gpt-4.1"))
    assert [s.family(m) for m in ("gpt-4.1-mini", "gpt-4.1-nano", "o3")] == ["mini", "gpt-4.1", "o3"]
    with pytest.raises(ValueError, match="PATTERN=FAMILY"):
        parse_families("gpt-4.1")


async def test_the_snapshot_ages_out_usage_a_span_after_this_replica_last_looked():
    clock = Clock()
    limiter = make(clock, guard_seconds=1.0)  # span = 61 s
    reservation = await limiter.reserve(KEY, 700, 0)
    [state] = limiter.snapshot()
    assert (state.used_tokens, state.pending_tokens, state.age_seconds) == (700, 700, 0.0)
    await limiter.settle(reservation, 300)
    clock.now += 30
    [state] = limiter.snapshot()
    assert (state.used_tokens, state.pending_tokens, state.age_seconds) == (300, 0, 30.0)
    clock.now += 31  # a whole span since the attempt: every entry it counted has left the window
    [state] = limiter.snapshot()
    assert (state.used_tokens, state.pending_tokens, state.age_seconds) == (0, 0, 61.0)
    assert state.budget_tokens == 1000  # the budget is not usage: it stays
    assert (await limiter.state(KEY)).used_tokens == 0  # and the store agrees
    await limiter.reserve(KEY, 200, 0)  # a new attempt refreshes the view
    [state] = limiter.snapshot()
    assert (state.used_tokens, state.age_seconds) == (200, 0.0)


async def test_gauge_tenant_labels_follow_the_metrics_convention():
    clock = Clock()
    shared = make(clock)
    await shared.reserve(LimiterKey("acme", "openai", "gpt-4.1"), 10, 0)
    per_tenant = make(clock, per_tenant=True)
    await per_tenant.reserve(LimiterKey("acme", "openai", "gpt-4.1"), 10, 0)
    await per_tenant.reserve(LimiterKey("", "openai", "gpt-4.1"), 10, 0)  # a direct caller without one
    labels = {
        (g.name, g.labels["tenant"])
        for g in limiter_gauges([*shared.snapshot(), *per_tenant.snapshot()])
        if g.name == "limiter_used_tokens"
    }
    assert labels == {
        ("limiter_used_tokens", ALL_TENANTS),
        ("limiter_used_tokens", "acme"),
        ("limiter_used_tokens", "default"),
    }
    ages = [g for g in limiter_gauges(shared.snapshot()) if g.name == "limiter_state_age_seconds"]
    assert [g.value for g in ages] == [0.0]


class HangingStore(MemoryStore):
    """A store that answers `answers` reservation attempts, then never again (a black hole)."""

    def __init__(self, settings: LimiterSettings, answers: int) -> None:
        super().__init__(settings)
        self.answers = answers

    async def try_reserve(self, bucket: str, entry_id: str, tokens: int):
        if self.answers <= 0:
            await asyncio.Event().wait()
        self.answers -= 1
        return await super().try_reserve(bucket, entry_id, tokens)

    async def settle(self, bucket: str, entry_id: str, tokens: int | None) -> None:
        await asyncio.Event().wait()

    async def outcome(self, bucket: str, rate_limited: bool) -> int:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def hanging(answers: int, **kw: object) -> AdaptiveTokenLimiter:
    s = LimiterSettings(initial_tokens=1000, max_tokens=1000, floor_tokens=100, **kw)  # type: ignore[arg-type]
    return AdaptiveTokenLimiter(HangingStore(s, answers), s)


async def test_a_store_that_never_answers_fails_the_attempt_with_a_reason():
    # Real time (the bound is the event loop's): a late store is tried again, with the same
    # entry, while the admission wait lasts (decision 0021); then the call is refused.
    limiter = hanging(0, store_timeout_seconds=0.3)
    with pytest.raises(MeshError) as info:
        await asyncio.wait_for(limiter.reserve(KEY, 10, max_wait_seconds=1.0), 20)
    assert (info.value.status, info.value.reason) == ("UNAVAILABLE", "DEPENDENCY_UNAVAILABLE")
    assert info.value.retry_after_seconds == 1.0
    assert "did not answer within the 1 s admission wait" in info.value.message
    attempts = int(info.value.message.split("(")[1].split(" attempt")[0])
    assert attempts >= 3 and "of up to 0.3 s" in info.value.message  # tried again, not failed at once
    # the admission wait bounds an attempt too (here below the store timeout)
    limiter = hanging(0, store_timeout_seconds=30)
    with pytest.raises(MeshError) as info:
        await asyncio.wait_for(limiter.reserve(KEY, 10, max_wait_seconds=0.2), 20)
    assert info.value.reason == "DEPENDENCY_UNAVAILABLE"
    assert f"of up to {MIN_ATTEMPT_SECONDS:g} s" in info.value.message  # never less than this


async def test_a_store_that_stops_answering_while_a_request_waits_ends_its_wait():
    limiter = hanging(2, store_timeout_seconds=30)
    await limiter.reserve(KEY, 900, 0)  # in flight: a later request polls
    with pytest.raises(MeshError) as info:
        await asyncio.wait_for(limiter.reserve(KEY, 500, max_wait_seconds=0.3), 20)
    # the store answered once for this request: what ran out is its wait
    assert (info.value.status, info.value.reason) == ("RESOURCE_EXHAUSTED", "RATE_LIMITED")
    assert "do not fit within the 0.3 s admission wait" in info.value.message


async def test_settles_and_outcomes_are_bounded_by_the_store_timeout():
    limiter = hanging(1, store_timeout_seconds=0.2)
    reservation = await limiter.reserve(KEY, 10, 0)
    await asyncio.wait_for(limiter.settle(reservation, 5), 20)  # logged, not raised
    await asyncio.wait_for(limiter.record_outcome(KEY, rate_limited=True), 20)
