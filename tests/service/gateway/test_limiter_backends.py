"""One behavior suite for every limiter store: memory, PostgreSQL and Redis (real servers).

Shared stores are isolated per test by a namespace of their own (bucket keys start with
it), so tests share the `test` database and the Redis on 127.0.0.1 without clearing them.
"Replicas" are separate limiters (separate engines / connection pools) over one store, as
separate gateway processes would be; on memory they share the one in-process store. These
tests run on the real clock with short windows; the rules' timing is covered exactly, with
an injected clock, in tests/unit/gateway/test_gateway_limiter.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from agentrt.core.errors import MeshError
from agentrt.gateway.limiter import (
    AdaptiveTokenLimiter,
    LimiterKey,
    LimiterSettings,
    OverBudget,
    build_limiter,
)
from agentrt.gateway.limiter.memory import MemoryStore
from tests.needs import unavailable
from tests.stores import PG_URL, REDIS_URL, pg_reachable

KEY = LimiterKey("tenant-a", "openai", "gpt-emu")

Replicas = Callable[..., AsyncIterator[list[AdaptiveTokenLimiter]]]


async def redis_reachable() -> bool:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        return bool(await client.ping())
    except (OSError, aioredis.RedisError):
        return False
    finally:
        await client.aclose()


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres), "redis"])
async def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres" and not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    if request.param == "redis" and not await redis_reachable():
        unavailable("Redis is not reachable on 127.0.0.1:6379")
    return request.param


@pytest.fixture
async def replicas(backend: str):
    """Return `make(n, **figures)`: n limiters over one fresh namespace of the store."""
    opened: list[AdaptiveTokenLimiter] = []
    namespace = "test-" + uuid.uuid4().hex[:16]

    async def make(n: int = 1, **figures: object) -> list[AdaptiveTokenLimiter]:
        base: dict = {
            "initial_tokens": 1000,
            "max_tokens": 2000,
            "floor_tokens": 100,
            "window_seconds": 30.0,
            "guard_seconds": 0.0,
            "cooldown_seconds": 30.0,
            "probe_fraction": 0.05,
            "poll_seconds": 0.02,
            "namespace": namespace,
        }
        settings = LimiterSettings(**{**base, **figures})
        if backend == "memory":
            store = MemoryStore(settings)
            limiters = [AdaptiveTokenLimiter(store, settings) for _ in range(n)]
        else:
            url = PG_URL if backend == "postgres" else REDIS_URL
            limiters = [build_limiter(backend, url, settings) for _ in range(n)]
        for limiter in limiters:
            await limiter.prepare()
        opened.extend(limiters)
        return limiters

    yield make
    for limiter in opened:
        await limiter.close()


async def test_admits_up_to_the_budget_then_refuses_with_retry_info(replicas):
    (limiter,) = await replicas()
    first = await limiter.reserve(KEY, 600, 0)
    await limiter.settle(first, 600)
    await limiter.settle(await limiter.reserve(KEY, 400, 0), 400)  # exactly the budget
    with pytest.raises(MeshError) as info:
        await limiter.reserve(KEY, 1, max_wait_seconds=0.5)
    err = info.value
    assert (err.status, err.reason, err.metadata["limiter"]) == (
        "RESOURCE_EXHAUSTED",
        "RATE_LIMITED",
        "gateway",
    )
    assert 25.0 < err.retry_after_seconds <= 30.0  # the first entry leaves the 30 s window
    state = await limiter.state(KEY)
    assert (state.budget_tokens, state.used_tokens, state.pending_tokens) == (1000, 1000, 0)


async def test_a_waiting_request_is_admitted_when_the_window_moves(replicas):
    (limiter,) = await replicas(window_seconds=0.6)
    await limiter.settle(await limiter.reserve(KEY, 1000, 0), 1000)
    later = await limiter.reserve(KEY, 300, max_wait_seconds=10)
    assert later.waited_seconds > 0
    assert (await limiter.state(KEY)).used_tokens == 300  # the first entry has left the window


async def test_settling_smaller_frees_room_for_waiters(replicas):
    (limiter,) = await replicas()
    bound = await limiter.reserve(KEY, 900, 0)  # an upper bound, in flight
    with pytest.raises(MeshError) as info:
        await limiter.reserve(KEY, 500, max_wait_seconds=0)
    assert info.value.retry_after_seconds == pytest.approx(0.02)  # only the in-flight entry is in the way
    waiter = asyncio.create_task(limiter.reserve(KEY, 500, max_wait_seconds=10))
    await limiter.settle(bound, 200)  # the provider counted 200
    assert (await waiter).tokens == 500
    state = await limiter.state(KEY)
    assert (state.used_tokens, state.pending_tokens) == (700, 500)


async def test_budget_and_consumption_are_shared_by_replicas(replicas):
    a, b = await replicas(2)
    await a.reserve(KEY, 800, 0)
    with pytest.raises(MeshError):
        await b.reserve(KEY, 300, 0)
    await b.record_outcome(KEY, rate_limited=True)  # b's provider throttled: one budget halves
    assert (await a.state(KEY)).budget_tokens == 500
    with pytest.raises(OverBudget):
        await a.reserve(KEY, 600, 10)


async def test_concurrent_reservations_through_three_replicas_never_exceed_the_budget(replicas):
    limiters = await replicas(3)
    # A short wait, not 0: with no wait each store attempt gets only MIN_ATTEMPT_SECONDS, which a
    # loaded machine's PostgreSQL row lock queue can exceed (UNAVAILABLE instead of an answer).
    calls = [limiters[i % 3].reserve(KEY, 50, max_wait_seconds=3) for i in range(60)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    admitted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, MeshError)]
    assert len(admitted) == 20 and len(refused) == 40  # 20 x 50 = the budget, exactly
    assert (await limiters[0].state(KEY)).used_tokens == 1000


async def test_larger_than_the_budget_fails_at_once_and_beyond_the_max_never_fits(replicas):
    (limiter,) = await replicas()
    with pytest.raises(OverBudget) as over:
        await limiter.reserve(KEY, 1500, max_wait_seconds=30)
    assert over.value.retry_after_seconds == 30.0
    with pytest.raises(OverBudget) as never:
        await limiter.reserve(KEY, 2500, max_wait_seconds=30)
    assert never.value.retry_after_seconds is None and "can never be admitted" in never.value.message
    assert (await limiter.state(KEY)).used_tokens == 0


async def test_a_burst_of_throttling_from_all_replicas_halves_once(replicas):
    a, b = await replicas(2)  # a 30 s cooldown
    await a.reserve(KEY, 10, 0)
    await asyncio.gather(*(r.record_outcome(KEY, rate_limited=True) for r in (a, b) for _ in range(4)))
    assert (await a.state(KEY)).budget_tokens == 500  # eight 429s, one episode
    await a.record_outcome(KEY, rate_limited=False)  # inside the cooldown: no probe
    assert (await b.state(KEY)).budget_tokens == 500


async def test_probing_climbs_to_the_max_and_halving_stops_at_the_floor(replicas):
    a, b = await replicas(2, cooldown_seconds=0.0)
    await a.reserve(KEY, 10, 0)
    for _ in range(3):
        await b.record_outcome(KEY, rate_limited=False)  # +100 each (5% of 2000)
    assert (await a.state(KEY)).budget_tokens == 1300
    for _ in range(20):
        await a.record_outcome(KEY, rate_limited=False)
    assert (await b.state(KEY)).budget_tokens == 2000
    for expected in (1000, 500, 250, 125, 100, 100):
        await (a, b)[expected % 2].record_outcome(KEY, rate_limited=True)
        assert (await a.state(KEY)).budget_tokens == expected


async def test_buckets_are_per_family_and_per_tenant_when_configured(replicas):
    (limiter,) = await replicas(per_tenant=True, families=(("gpt-*", "gpt"),))
    await limiter.reserve(LimiterKey("a", "openai", "gpt-emu"), 1000, 0)
    await limiter.reserve(LimiterKey("b", "openai", "gpt-emu"), 1000, 0)  # another tenant
    with pytest.raises(MeshError):
        await limiter.reserve(LimiterKey("a", "openai", "gpt-other"), 1, 0)  # same family
    seen = {(s.tenant, s.family, s.used_tokens) for s in limiter.snapshot()}
    assert seen == {("a", "gpt", 1000), ("b", "gpt", 1000)}


@pytest.mark.parametrize(
    ("kind", "url"),
    [
        pytest.param("postgres", "postgresql+asyncpg://postgres@127.0.0.1:1/test", id="postgres"),
        pytest.param("redis", "redis://127.0.0.1:1/0", id="redis"),
    ],
)
async def test_an_unreachable_store_fails_admission_closed(kind, url):
    limiter = build_limiter(kind, url, LimiterSettings())
    try:
        with pytest.raises(MeshError) as info:
            await limiter.reserve(KEY, 10, 0)
        assert (info.value.status, info.value.reason) == ("UNAVAILABLE", "DEPENDENCY_UNAVAILABLE")
        assert info.value.retry_after_seconds == 1.0
        await limiter.record_outcome(KEY, rate_limited=True)  # logged, not raised
    finally:
        await limiter.close()


@pytest.mark.parametrize(
    ("kind", "url"),
    [("postgres", "sqlite+aiosqlite:///x.db"), ("redis", PG_URL), ("etcd", "")],
    # ids without the URL: PG_URL names this process's database, and pytest-xdist requires
    # every worker to collect the same test ids
    ids=["postgres-sqlite", "redis-postgresql", "etcd"],
)
def test_a_store_url_of_the_wrong_kind_is_refused(kind, url):
    with pytest.raises(ValueError, match="URL|backend"):
        build_limiter(kind, url, LimiterSettings())


async def test_an_attempt_repeated_with_its_entry_id_is_counted_once(replicas):
    # A reservation whose attempt timed out is tried again with the same entry id; when the
    # lost attempt had been admitted, the repeat must not hold its tokens a second time.
    (limiter,) = await replicas(1)
    bucket = limiter.settings.bucket(KEY)
    first = await limiter.store.try_reserve(bucket, "entry-1", 600)
    again = await limiter.store.try_reserve(bucket, "entry-1", 600)
    assert first.admitted and again.admitted
    assert (await limiter.state(KEY)).used_tokens == 600
    assert (await limiter.store.try_reserve(bucket, "entry-2", 600)).admitted is False


@pytest.mark.postgres
async def test_a_store_that_answers_late_is_a_wait_not_a_failure():
    # The bucket's row is held by another transaction for longer than the store timeout
    # (a PostgreSQL row lock queue on a loaded machine): the reservation waits, within its
    # admission wait, and is admitted once the store answers, not failed UNAVAILABLE.
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    from agentrt.mesh.storage.db import Database

    settings = LimiterSettings(
        initial_tokens=1000,
        max_tokens=2000,
        floor_tokens=100,
        store_timeout_seconds=0.5,
        namespace="test-" + uuid.uuid4().hex[:16],
    )
    limiter = build_limiter("postgres", PG_URL, settings)
    holder = Database(PG_URL)
    try:
        await limiter.prepare()
        await limiter.reserve(KEY, 10, 5)  # the bucket's row exists
        bucket = settings.bucket(KEY)
        locked, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with holder.write() as conn:
                await conn.exec_driver_sql(
                    "SELECT 1 FROM gateway_limiter_budgets WHERE bucket = $1 FOR UPDATE", (bucket,)
                )
                locked.set()
                await release.wait()

        task = asyncio.create_task(hold())
        await locked.wait()
        reserving = asyncio.create_task(limiter.reserve(KEY, 100, max_wait_seconds=20))
        while not reserving.done() and not await _waits_on_lock(holder, bucket):
            await asyncio.sleep(0.05)
        # three attempts' worth of the store timeout pass with the lock held
        await asyncio.sleep(settings.store_timeout_seconds * 3)
        assert not reserving.done(), reserving
        release.set()
        await task
        reservation = await reserving
        assert reservation.tokens == 100
        assert (await limiter.state(KEY)).used_tokens == 110
    finally:
        await holder.close()
        await limiter.close()


async def _waits_on_lock(db, bucket: str) -> bool:  # type: ignore[no-untyped-def]
    async with db.read() as conn:
        found = await conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%gateway_limiter_reserve%'"
        )
        return bool(found.scalar())
