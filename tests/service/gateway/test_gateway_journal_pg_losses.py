"""The model-call journal on PostgreSQL when its connections are lost (decision 0063, journal/late.py).

A keyed call reaches the provider once even when the journal's record cannot be written at
once: the record is retried, and an answer still unrecorded is kept by the gateway that asked,
recorded in the background, and answers the key's repeats meanwhile. Real gateway servers
(production build_server), real PostgreSQL (a database of the test's own, dropped after),
the wire-level provider emulator; connections are lost by pg_terminate_backend.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from gateway_helpers import emulator_config, model_request, user

from agentrt.gateway.journal import State
from agentrt.gateway.server import build_server
from agentrt.mesh.status import reason_of
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply
from tests.needs import unavailable
from tests.stores import PG_HOST, pg_reachable

pytestmark = pytest.mark.postgres

MODEL_PATHS = ("/v1/responses", "/v1/chat/completions", "/v1/messages")


def asked(emu) -> int:
    return sum(1 for path, _ in emu.requests if path in MODEL_PATHS)


@pytest.fixture
async def journal_db() -> AsyncIterator[str]:
    """A PostgreSQL database of this test's own (its name), dropped after."""
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    import asyncpg

    name = f"brk_journal_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _wait_for(predicate, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await predicate()
        if got:
            return got
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


def _keyed() -> pb.ModelRequest:
    """A model request under a fresh idempotency key."""
    request = model_request("openai", user("write out.txt"))
    request.idempotency_key = f"run-{uuid.uuid4().hex}/turn-1/ctx-3-e1"
    return request


async def _hold_row(conn, key: str):  # type: ignore[no-untyped-def]
    """Wait until key's journal row exists, then hold it FOR UPDATE; return the transaction."""
    count = "SELECT count(*) FROM gateway_model_calls WHERE call_key = $1"
    await _wait_for(lambda: conn.fetchval(count, key))
    tx = conn.transaction()
    await tx.start()
    await conn.execute("SELECT 1 FROM gateway_model_calls WHERE call_key = $1 FOR UPDATE", key)
    return tx


async def test_a_record_whose_connection_is_lost_is_not_asked_again_on_repeat(start_server, emu, journal_db):
    """The record (finish) loses its connection mid-statement: it is tried again, and a repeat
    of the key (the run's resend after a broken stream, a restarted runs replica) is replayed,
    not asked of the provider a second time (found by the round's breaker: on the driver the
    record was not tried again, and the row stayed PENDING under this gateway's holder)."""
    import asyncpg

    url = f"postgresql+asyncpg://postgres@{PG_HOST}/{journal_db}"
    address = await start_server(build_server(emulator_config(emu, journal_url=url)))
    channel = grpc.aio.insecure_channel(address)
    gw = pb_grpc.ModelGatewayServiceStub(channel)
    emu.script([Reply(text="the one answer", reply_delay=1.0), Reply(text="asked twice")])
    request = _keyed()

    locker = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    admin = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    try:
        first = asyncio.ensure_future(gw.Generate(pb.GenerateRequest(request=request)))
        # Hold the row, so the gateway's record waits on it; then end that backend.
        tx = await _hold_row(locker, request.idempotency_key)
        pid = await _wait_for(
            lambda: admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' "
                "AND query LIKE 'UPDATE gateway_model_calls%'",
                journal_db,
            )
        )
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.3)
        await tx.rollback()
        answer = await asyncio.wait_for(first, 15)
        assert answer.response.content[0].text.text == "the one answer"
        assert asked(emu) == 1

        again = await gw.Generate(pb.GenerateRequest(request=request))
        state = await admin.fetchval(
            "SELECT state FROM gateway_model_calls WHERE call_key = $1", request.idempotency_key
        )
        assert asked(emu) == 1, f"the provider was asked again for the same key (row state {state})"
        assert again.replayed and again.response == answer.response
    finally:
        await locker.close()
        await admin.close()
        await channel.close()


async def test_same_keys_on_two_replicas_while_the_journals_backends_are_ended(start_server, emu, journal_db):
    """Many keyed calls (each key 4 callers over 2 replicas) while every backend of the journal's
    database is ended every 50 ms: each answer is a success or UNAVAILABLE with a reason, never
    INTERNAL, and no key is asked of the provider twice (no holder died). Before the record was
    retried and kept, 4-7 keys of 30 were asked twice."""
    import collections
    import json

    import asyncpg

    from agentrt.mesh.status import reason_of

    url = f"postgresql+asyncpg://postgres@{PG_HOST}/{journal_db}"
    stubs, channels = [], []
    for _ in range(2):
        address = await start_server(
            build_server(emulator_config(emu, journal_url=url, journal_lease_seconds=2.0))
        )
        channels.append(grpc.aio.insecure_channel(address))
        stubs.append(pb_grpc.ModelGatewayServiceStub(channels[-1]))
    keys = 30
    emu.script([Reply(text=f"answer {i}", reply_delay=0.2) for i in range(keys * 8)])
    admin = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/postgres")
    stop = asyncio.Event()

    async def killer() -> int:
        ended = 0
        while not stop.is_set():
            ended += len(
                await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid()",
                    journal_db,
                )
            )
            await asyncio.sleep(0.05)
        return ended

    async def one(i: int, n: int) -> tuple[str, object]:
        request = model_request("openai", user(f"key {i}"))
        request.idempotency_key = f"brk-{i}"
        stub = stubs[n % 2]
        try:
            if n % 2:
                finals = [
                    e.final
                    async for e in stub.StreamGenerate(pb.StreamGenerateRequest(request=request))
                    if e.WhichOneof("event") == "final"
                ]
                return "ok", finals[-1].response.content[0].text.text
            got = await stub.Generate(pb.GenerateRequest(request=request))
            return "ok", got.response.content[0].text.text
        except grpc.aio.AioRpcError as err:
            return err.code().name, reason_of(err)

    kill = asyncio.ensure_future(killer())
    try:
        await asyncio.sleep(0.1)
        results = await asyncio.gather(*(one(i, n) for i in range(keys) for n in range(4)))
    finally:
        stop.set()
        ended = await kill
        await admin.close()
        for ch in channels:
            await ch.close()
    per_key = collections.Counter()
    for path, body in emu.requests:
        if path in MODEL_PATHS:
            text = json.dumps(body)
            for i in range(keys):
                if f'"key {i}"' in text:
                    per_key[i] += 1
    bad = [r for r in results if r[0] not in ("ok", "UNAVAILABLE") or (r[0] == "UNAVAILABLE" and not r[1])]
    summary = collections.Counter(r[0] for r in results)
    twice = {k: v for k, v in per_key.items() if v > 1}
    assert not bad and not twice, (
        f"ended {ended} backends; results {summary}; bad {bad[:5]}; asked twice {twice}"
    )


async def test_an_answer_recorded_late_answers_repeats_here_and_makes_other_replicas_wait(
    start_server, emu, journal_db
):
    # Every attempt to record the answer loses its connection for longer than the record's
    # retries: the caller gets the answer unrecorded, a repeat on the same replica is answered
    # from the kept copy, a repeat on another replica waits on the live lease, and once the
    # database lets the record through it is written and that repeat replays it.
    import asyncpg

    url = f"postgresql+asyncpg://postgres@{PG_HOST}/{journal_db}"
    stubs, channels = [], []
    for _ in range(2):
        address = await start_server(build_server(emulator_config(emu, journal_url=url)))
        channels.append(grpc.aio.insecure_channel(address))
        stubs.append(pb_grpc.ModelGatewayServiceStub(channels[-1]))
    a, b = stubs
    emu.script([Reply(text="the one answer", reply_delay=0.5), Reply(text="asked twice")])
    request = _keyed()
    key = request.idempotency_key
    locker = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    admin = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    stop = asyncio.Event()

    async def end_blocked_writes() -> None:
        while not stop.is_set():
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 "
                "AND wait_event_type = 'Lock' AND query LIKE 'UPDATE gateway_model_calls%'",
                journal_db,
            )
            await asyncio.sleep(0.02)

    killer = None
    try:
        first = asyncio.ensure_future(a.Generate(pb.GenerateRequest(request=request)))
        tx = await _hold_row(locker, key)
        killer = asyncio.ensure_future(end_blocked_writes())
        answer = await asyncio.wait_for(first, 30)  # handed over after the record's retries
        assert answer.response.content[0].text.text == "the one answer" and not answer.replayed
        here = await a.Generate(pb.GenerateRequest(request=request))
        assert here.replayed and here.response == answer.response
        changed = model_request("openai", user("write another.txt"))
        changed.idempotency_key = key
        with pytest.raises(grpc.aio.AioRpcError) as reused:  # not asked, not the kept answer
            await a.Generate(pb.GenerateRequest(request=changed))
        assert reused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(reused.value) == "IDEMPOTENCY_KEY_REUSED"
        # The call answered: nothing is left to stop (not "canceled", and not UNAVAILABLE
        # from a store asked to mark a row it cannot write now).
        stopped = await a.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=key))
        assert not stopped.canceled
        elsewhere = asyncio.ensure_future(b.Generate(pb.GenerateRequest(request=request)))
        await asyncio.sleep(1.0)
        assert not elsewhere.done()  # it waits on the live holder's row
        stop.set()
        await killer
        await tx.rollback()
        other = await asyncio.wait_for(elsewhere, 30)
        assert other.replayed and other.response == answer.response
        state = await admin.fetchval("SELECT state FROM gateway_model_calls WHERE call_key = $1", key)
        assert state == int(State.DONE)
        assert asked(emu) == 1
    finally:
        stop.set()
        if killer is not None:
            await asyncio.gather(killer, return_exceptions=True)
        await locker.close()
        await admin.close()
        for channel in channels:
            await channel.close()


async def test_an_answer_whose_record_hangs_reaches_its_caller_before_the_lease_lapses(
    start_server, emu, journal_db
):
    # The record waits on a lock no one releases: its tries (each up to the journal's statement
    # timeout) must not outlast the holder's lease, which no one renews meanwhile; within a
    # third of it the answer reaches its caller and is kept (late.py renews the lease).
    import asyncpg

    url = f"postgresql+asyncpg://postgres@{PG_HOST}/{journal_db}"
    lease = 6.0
    address = await start_server(
        build_server(emulator_config(emu, journal_url=url, journal_lease_seconds=lease))
    )
    channel = grpc.aio.insecure_channel(address)
    gw = pb_grpc.ModelGatewayServiceStub(channel)
    emu.script([Reply(text="the one answer", reply_delay=0.5), Reply(text="asked twice")])
    request = _keyed()
    locker = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    try:
        first = asyncio.ensure_future(gw.Generate(pb.GenerateRequest(request=request)))
        tx = await _hold_row(locker, request.idempotency_key)
        answer = await asyncio.wait_for(first, lease - 0.5)
        assert answer.response.content[0].text.text == "the one answer"
        again = await gw.Generate(pb.GenerateRequest(request=request))
        assert again.replayed and again.response == answer.response
        await tx.rollback()
        done = "SELECT state FROM gateway_model_calls WHERE call_key = $1"
        await _wait_for(lambda: _is_done(locker, done, request.idempotency_key))
        assert asked(emu) == 1
    finally:
        await locker.close()
        await channel.close()


async def _is_done(conn, query: str, key: str) -> bool:  # type: ignore[no-untyped-def]
    return await conn.fetchval(query, key) == int(State.DONE)


@pytest.mark.parametrize("rpc", ["Generate", "StreamGenerate"])
async def test_a_cancel_after_the_provider_answered_keeps_the_answer_and_asks_nothing_again(
    start_server, emu, journal_db, rpc
):
    # The provider answered and the record waits on a locked row: the call is paid for, so a
    # CancelGenerate then has nothing left to stop. It answers canceled=false, the caller gets
    # the answer, and the key's repeats (here and on another replica) replay it; the provider
    # is asked once. Before: the cancel threw the answer away, left the row PENDING under
    # this holder, and the repeat here asked the provider again at once.
    import asyncpg

    url = f"postgresql+asyncpg://postgres@{PG_HOST}/{journal_db}"
    lease = 6.0
    stubs, channels = [], []
    for _ in range(2):
        address = await start_server(
            build_server(emulator_config(emu, journal_url=url, journal_lease_seconds=lease))
        )
        channels.append(grpc.aio.insecure_channel(address))
        stubs.append(pb_grpc.ModelGatewayServiceStub(channels[-1]))
    a, b = stubs
    # Slow enough either way (a reply's delay, a stream's events) for the row to be locked first.
    emu.script(
        [
            Reply(text="the one answer", reply_delay=0.5, chunk_chars=2, event_delay=0.05),
            Reply(text="asked twice"),
        ]
    )
    request = _keyed()
    key = request.idempotency_key
    locker = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    watcher = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    try:
        first = asyncio.ensure_future(_answer(a, request, rpc))
        tx = await _hold_row(locker, key)
        await _wait_for(
            lambda: _waits_on_lock(watcher, journal_db, "UPDATE gateway_model_calls%")
        )  # answered; its record waits
        stopped = await a.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=key))
        assert not stopped.canceled
        answer = await asyncio.wait_for(first, lease)
        assert answer.response.content[0].text.text == "the one answer"
        again = await a.Generate(pb.GenerateRequest(request=request))
        assert again.replayed and again.response == answer.response
        await tx.rollback()
        other = await asyncio.wait_for(b.Generate(pb.GenerateRequest(request=request)), 30)
        assert other.replayed and other.response == answer.response
        done = "SELECT state FROM gateway_model_calls WHERE call_key = $1"
        await _wait_for(lambda: _is_done(locker, done, key))
        assert asked(emu) == 1
    finally:
        await locker.close()
        await watcher.close()
        for channel in channels:
            await channel.close()


async def _answer(stub, request: pb.ModelRequest, rpc: str) -> pb.GenerateResponse:  # type: ignore[no-untyped-def]
    """The call's response through Generate, or the final of a StreamGenerate read to its end."""
    if rpc == "Generate":
        return await stub.Generate(pb.GenerateRequest(request=request))
    final = None
    async for item in stub.StreamGenerate(pb.StreamGenerateRequest(request=request)):
        if item.WhichOneof("event") == "final":
            final = item.final
    assert final is not None
    return final


async def _waits_on_lock(conn, database: str, query: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether a statement LIKE `query` waits on a lock in `database` (ILIKE)."""
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' "
            "AND query ILIKE $2",
            database,
            query,
        )
    )


@pytest.mark.parametrize("rpc", ["Generate", "StreamGenerate"])
async def test_a_cancel_while_the_limiter_settles_an_answered_call_stops_nothing(
    start_server, emu, journal_db, rpc
):
    # Between the provider's answer and the journal's record the gateway settles the call's
    # reservation in the limiter's store (PostgreSQL here): the call is paid for by then, so a
    # CancelGenerate in that gap stops nothing either. Before: it cancelled the flight there,
    # the caller got CANCELLED and the key's repeat asked the provider again (breaker finding).
    import asyncpg

    url = f"postgresql+asyncpg://postgres@{PG_HOST}/{journal_db}"
    config = emulator_config(
        emu, journal_url=url, journal_lease_seconds=6.0, limiter_backend="postgres", limiter_url=url
    )
    channel = grpc.aio.insecure_channel(await start_server(build_server(config)))
    gw = pb_grpc.ModelGatewayServiceStub(channel)
    emu.script(
        [
            Reply(text="the one answer", reply_delay=1.0, chunk_chars=2, event_delay=0.1),
            Reply(text="asked twice"),
        ]
    )
    request = _keyed()
    key = request.idempotency_key
    locker = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    watcher = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/{journal_db}")
    try:
        first = asyncio.ensure_future(_answer(gw, request, rpc))
        await _wait_for(lambda: _provider_asked(emu))  # reserved, then asked: hold the limiter
        tx = locker.transaction()
        await tx.start()
        await locker.execute("LOCK TABLE gateway_limiter_entries IN EXCLUSIVE MODE")
        await asyncio.sleep(2.0)  # the reply (1.0 s, or 7 events 0.1 s apart) is in by now
        assert await _waits_on_lock(watcher, journal_db, "%gateway_limiter%")  # its settle waits on the lock
        stopped = await gw.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=key))
        assert not stopped.canceled
        await tx.rollback()
        answer = await asyncio.wait_for(first, 10)
        assert answer.response.content[0].text.text == "the one answer"
        again = await gw.Generate(pb.GenerateRequest(request=request))
        assert again.replayed and again.response == answer.response
        assert asked(emu) == 1
    finally:
        await locker.close()
        await watcher.close()
        await channel.close()


async def _provider_asked(emu) -> bool:  # type: ignore[no-untyped-def]
    return asked(emu) == 1
