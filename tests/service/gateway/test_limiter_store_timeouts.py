"""A limiter store that accepts TCP connections but never answers (a black hole).

Each store operation is bounded (LimiterSettings.store_timeout_seconds: the asyncpg connect
and statement timeouts, Redis's socket timeouts, and the limiter's own bound), and an
admission attempt also by the request's wait: callers get UNAVAILABLE/DEPENDENCY_UNAVAILABLE
with its reason before their deadline instead of waiting for the driver's minute. The calls
carry gRPC deadlines far beyond the expected answer so that a regression shows as
DEADLINE_EXCEEDED, not as a hung test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import grpc
import pytest
from gateway_helpers import emulator_config, generate

from agentrt.gateway.limiter import AdaptiveTokenLimiter, LimiterKey, LimiterSettings, Reservation
from agentrt.gateway.limiter.postgres import PostgresStore
from agentrt.gateway.limiter.redis import RedisStore
from agentrt.gateway.server import build_server
from agentrt.mesh.status import details_of
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc

KEY = LimiterKey("default", "openai", "gpt-emu")
#: How long a test lets one bounded operation take before calling it hung, in seconds.
HUNG = 20.0


@pytest.fixture
async def black_hole() -> AsyncIterator[int]:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    for writer in held:
        writer.close()
    await server.wait_closed()


def pg_limiter(port: int, **figures: object) -> AdaptiveTokenLimiter:
    settings = LimiterSettings(**figures)  # type: ignore[arg-type]
    return AdaptiveTokenLimiter(
        PostgresStore(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/test", settings), settings
    )


async def ends(operation: Awaitable[object]) -> BaseException | None:
    """Run operation; return what it raised (None if it returned). Fails if it is still running after HUNG."""
    task = asyncio.ensure_future(operation)
    done, _ = await asyncio.wait({task}, timeout=HUNG)
    if not done:
        task.cancel()
        pytest.fail(f"the store operation was still waiting after {HUNG} s")
    return task.exception()


async def test_every_postgres_store_operation_gives_up_after_the_store_timeout(black_hole):
    settings = LimiterSettings(store_timeout_seconds=0.5)
    store = PostgresStore(f"postgresql+asyncpg://postgres@127.0.0.1:{black_hole}/test", settings)
    try:
        for operation in (
            store.prepare(),  # migrations: the connect timeout
            store.try_reserve("b", "e", 10),
            store.settle("b", "e", 5),
            store.outcome("b", True),
            store.read("b"),
        ):
            assert isinstance(await ends(operation), TimeoutError | OSError)
    finally:
        await store.close()


async def test_the_redis_store_gives_up_after_the_store_timeout(black_hole):
    settings = LimiterSettings(store_timeout_seconds=0.5)
    store = RedisStore(f"redis://127.0.0.1:{black_hole}/0", settings)
    try:
        for operation in (store.prepare(), store.try_reserve("b", "e", 10)):
            assert await ends(operation) is not None
    finally:
        await store.close()


async def test_the_limiter_fails_admission_with_a_reason_and_never_hangs_settles(black_hole):
    limiter = pg_limiter(black_hole, store_timeout_seconds=30)  # the request's wait is the bound here
    try:
        err = await ends(limiter.reserve(KEY, 10, max_wait_seconds=0.5))
        assert (getattr(err, "status", None), getattr(err, "reason", None)) == (
            "UNAVAILABLE",
            "DEPENDENCY_UNAVAILABLE",
        )
        short = pg_limiter(black_hole, store_timeout_seconds=0.5)
        try:  # settles and outcomes are logged, never raised, and end with the store timeout
            assert (
                await ends(short.settle(Reservation(KEY, 10, 0.0, short.settings.bucket(KEY), "e"), 5))
                is None
            )
            assert await ends(short.record_outcome(KEY, rate_limited=True)) is None
        finally:
            await short.close()
    finally:
        await limiter.close()


@pytest.mark.parametrize(
    ("max_queue_wait", "deadline"),
    [(0.5, 30.0), (None, 3.0)],  # a short admission wait without a deadline; a deadline alone
    ids=["max_queue_wait", "deadline"],
)
async def test_a_generate_gets_unavailable_before_its_deadline(
    start_server, emu, black_hole, max_queue_wait, deadline
):
    limiter = pg_limiter(black_hole)  # the default store timeout (5 s)
    try:
        address = await start_server(build_server(emulator_config(emu), limiter))
        request = generate("openai")
        if max_queue_wait is not None:
            request.request.max_queue_wait.FromMilliseconds(int(max_queue_wait * 1000))
        async with grpc.aio.insecure_channel(address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await pb_grpc.ModelGatewayServiceStub(channel).Generate(request, timeout=deadline)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
        reason, metadata, retry_after = details_of(info.value)
        assert (reason, metadata.get("limiter"), retry_after) == ("DEPENDENCY_UNAVAILABLE", "gateway", 1.0)
        assert emu.requests == []  # nothing was sent without admission
    finally:
        await limiter.close()
