"""The model-call journal over real gateways: a keyed call reaches the provider once.

Each test runs the production build_server against the provider emulator, with the
journal in this process (memory), in a SQLite file, or in PostgreSQL; the two-replica tests
run two gateways over one shared store. The emulator's request log is the witness.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from dataclasses import replace

import grpc
import pytest
from gateway_helpers import emulator_config, model_request, user

from agentrt.gateway.journal import State
from agentrt.gateway.journal.sql import SqlJournalStore
from agentrt.gateway.server import build_server
from agentrt.mesh.status import reason_of
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ErrorReply, Reply
from tests.needs import unavailable
from tests.stores import PG_URL, pg_reachable

MODEL_PATHS = ("/v1/responses", "/v1/chat/completions", "/v1/messages")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def journal_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "postgres":
        if not await pg_reachable():
            unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
        return PG_URL
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/gateway.db"
    return "memory"


def keyed(text: str = "write out.txt", key: str | None = None) -> pb.ModelRequest:
    request = model_request("openai", user(text))
    request.idempotency_key = key or f"run-{uuid.uuid4().hex}/turn-1/ctx-3-e1"
    return request


def asked(emu) -> int:
    return sum(1 for path, _ in emu.requests if path in MODEL_PATHS)


async def open_gateways(start_server, emu, url: str, count: int = 1, **overrides: object):
    stubs, channels = [], []
    for _ in range(count):
        address = await start_server(build_server(emulator_config(emu, journal_url=url, **overrides)))
        channel = grpc.aio.insecure_channel(address)
        channels.append(channel)
        stubs.append(pb_grpc.ModelGatewayServiceStub(channel))
    return stubs, channels


async def test_a_repeated_generate_is_answered_from_the_journal(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="first answer"), Reply(text="second answer")])
    request = keyed()
    first = await gw.Generate(pb.GenerateRequest(request=request))
    again = await gw.Generate(pb.GenerateRequest(request=request))
    assert asked(emu) == 1
    assert not first.replayed and again.replayed
    assert again.response == first.response and first.response.content[0].text.text == "first answer"
    # an unkeyed call is asked every time
    request.idempotency_key = ""
    other = await gw.Generate(pb.GenerateRequest(request=request))
    assert asked(emu) == 2 and other.response.content[0].text.text == "second answer"
    for ch in channels:
        await ch.close()


async def test_a_repeated_stream_replays_deltas_then_the_final(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="streamed once, replayed after", chunk_chars=4)])
    request = keyed()
    live = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    replay = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    assert asked(emu) == 1
    for items in (live, replay):
        assert "".join(i.text_delta for i in items) == "streamed once, replayed after"
        assert [i.WhichOneof("event") for i in items].count("final") == 1
        assert items[-1].WhichOneof("event") == "final"
    assert not live[-1].final.replayed and replay[-1].final.replayed
    assert replay[-1].final.response == live[-1].final.response
    for ch in channels:
        await ch.close()


async def test_a_caller_gone_mid_stream_leaves_the_call_running_for_its_repeat(
    start_server, emu, journal_url
):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="a slow answer of many deltas", chunk_chars=2, event_delay=0.05)])
    request = keyed()
    call = gw.StreamGenerate(pb.StreamGenerateRequest(request=request))
    async for item in call:
        if item.text_delta:
            call.cancel()  # the caller goes away after its first delta
            break
    again = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    assert asked(emu) == 1
    assert "".join(i.text_delta for i in again) == "a slow answer of many deltas"
    assert again[-1].final.replayed
    for ch in channels:
        await ch.close()


@pytest.mark.parametrize("rpc", ["Generate", "StreamGenerate"])
async def test_a_repeat_on_another_replica_while_in_flight_waits_for_it(start_server, emu, tmp_path, rpc):
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    (a, b), channels = await open_gateways(start_server, emu, PG_URL, count=2)
    emu.script([Reply(text="one answer for both", chunk_chars=3, event_delay=0.03, reply_delay=0.5)])
    request = keyed()

    async def call(gw) -> pb.GenerateResponse:
        if rpc == "Generate":
            return await gw.Generate(pb.GenerateRequest(request=request))
        items = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
        assert "".join(i.text_delta for i in items) == "one answer for both"
        return items[-1].final

    first = asyncio.create_task(call(a))
    while asked(emu) == 0:  # the first replica is asking the provider
        await asyncio.sleep(0.01)
    second = await call(b)
    assert (await first).response == second.response
    assert asked(emu) == 1 and second.replayed
    for ch in channels:
        await ch.close()


async def test_a_dead_holders_call_is_asked_again_once_after_its_lease(start_server, emu, tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/gateway.db"
    (a, b), channels = await open_gateways(start_server, emu, url, count=2, journal_lease_seconds=1.0)
    request = keyed()
    store = SqlJournalStore(url)
    try:
        now = time.time()
        from agentrt.gateway.journal import fingerprint

        # a holder that claimed the key and died: its lease (1 s) is never renewed
        _, claimed = await store.claim(
            request.tenant or "default",
            request.idempotency_key,
            fingerprint(request),
            "dead:1",
            now,
            now + 1.0,
        )
        assert claimed
        emu.script([Reply(text="asked again")])
        started = time.monotonic()
        answers = await asyncio.gather(
            a.Generate(pb.GenerateRequest(request=request)), b.Generate(pb.GenerateRequest(request=request))
        )
        assert time.monotonic() - started >= 0.5  # waited for the dead holder's lease
        assert asked(emu) == 1  # two waiters, one re-ask
        assert answers[0].response == answers[1].response
        assert sorted(a.replayed for a in answers) == [False, True]
        row, _ = await store.claim(request.tenant or "default", request.idempotency_key, "", "x", now, now)
        assert row.takeovers == 1 and row.response
    finally:
        await store.close()
    for ch in channels:
        await ch.close()


async def test_a_failed_call_releases_its_key(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([ErrorReply(400, kind="invalid_request"), Reply(text="now it works")])
    request = keyed()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gw.Generate(pb.GenerateRequest(request=request))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ok = await gw.Generate(pb.GenerateRequest(request=request))
    assert asked(emu) == 2 and not ok.replayed and ok.response.content[0].text.text == "now it works"
    for ch in channels:
        await ch.close()


@pytest.mark.parametrize(
    "key",
    ["k" * 257, "run/turn-1\n", "tab\tkey", "del\x7fkey", "c1\x85key"],
    ids=["too-long", "newline", "tab", "del", "c1"],
)
async def test_a_bad_key_is_refused_and_changes_nothing(start_server, emu, journal_url, key):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gw.Generate(pb.GenerateRequest(request=keyed(key=key)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(err.value) == "INVALID_VALUE" and "idempotency_key" in (err.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=keyed(key=key)))]
    assert reason_of(err.value) == "INVALID_VALUE"
    assert asked(emu) == 0
    emu.script([Reply(text="still serving")])
    ok = await gw.Generate(pb.GenerateRequest(request=keyed(key="k" * 256)))
    assert ok.response.content[0].text.text == "still serving"
    for ch in channels:
        await ch.close()


async def test_a_key_reused_by_another_request_is_refused(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="the first request's answer")])
    key = f"run-{uuid.uuid4().hex}/turn-1/ctx-3-e1"
    await gw.Generate(pb.GenerateRequest(request=keyed("first question", key)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gw.Generate(pb.GenerateRequest(request=keyed("another question", key)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(err.value) == "IDEMPOTENCY_KEY_REUSED"
    assert asked(emu) == 1
    # the same request with another queue wait is the same call
    same = keyed("first question", key)
    same.max_queue_wait.FromSeconds(3)
    assert (await gw.Generate(pb.GenerateRequest(request=same))).replayed
    for ch in channels:
        await ch.close()


async def test_another_tenant_never_sees_a_journaled_answer(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="for acme"), Reply(text="for globex")])
    request = keyed()
    one = await gw.Generate(pb.GenerateRequest(request=request), metadata=[("x-agentrt-tenant", "acme")])
    two = await gw.Generate(pb.GenerateRequest(request=request), metadata=[("x-agentrt-tenant", "globex")])
    assert asked(emu) == 2 and not two.replayed
    assert (
        one.response.content[0].text.text == "for acme" and two.response.content[0].text.text == "for globex"
    )
    for ch in channels:
        await ch.close()


async def test_rows_past_retention_are_swept(tmp_path):
    store = SqlJournalStore(f"sqlite+aiosqlite:///{tmp_path}/gateway.db")
    try:
        await store.prepare()
        await store.claim("t", "old", "f", "h", 1000.0, 1010.0)
        await store.finish("t", "old", b"answer", 1001.0)
        await store.claim("t", "new", "f", "h", 5000.0, 5010.0)
        assert await store.sweep(now_s=5000.0, ttl_s=3600.0) == 1
        row, inserted = await store.claim("t", "old", "g", "h2", 5001.0, 5011.0)
        assert inserted and row.holder == "h2"  # the old answer is gone: a new call
        row, inserted = await store.claim("t", "new", "f", "h2", 5001.0, 5011.0)
        assert not inserted and row.holder == "h"
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_the_store_claims_and_records_alike_on_both_backends(backend, tmp_path):
    # PostgreSQL claims and records with the driver's own statements (decision 0063), SQLite
    # through SQLAlchemy: the rows and answers of each step must be the same.
    if backend == "postgres" and not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    store = SqlJournalStore(PG_URL if backend == "postgres" else f"sqlite+aiosqlite:///{tmp_path}/gateway.db")
    key = f"k-{uuid.uuid4().hex}"
    try:
        await store.prepare()
        first, inserted = await store.claim("t", key, "fp", "holder-a", 1000.0, 1010.0)
        assert inserted
        assert (first.fingerprint, first.state, first.holder) == ("fp", State.PENDING, "holder-a")
        assert (first.lease_until_s, first.takeovers, first.response, first.created_at_s) == (
            1010.0,
            0,
            b"",
            1000.0,
        )
        again, inserted = await store.claim("t", key, "fp2", "holder-b", 1001.0, 1011.0)
        assert not inserted and again == first  # the first claim's row, unchanged
        assert await store.finish("t", key, b"answer-a", 1002.0) == b"answer-a"
        # a second record (a takeover that answered too) gets the answer recorded first
        assert await store.finish("t", key, b"answer-b", 1003.0) == b"answer-a"
        done, inserted = await store.claim("t", key, "fp", "holder-c", 1004.0, 1014.0)
        assert not inserted and (done.state, done.response, done.holder) == (
            State.DONE,
            b"answer-a",
            "holder-a",
        )
        other = f"k-{uuid.uuid4().hex}"
        assert await store.finish("t", other, b"never claimed", 1005.0) == b"never claimed"
        fresh, inserted = await store.claim("t", other, "fp", "holder-d", 1006.0, 1016.0)
        assert inserted and fresh.state == State.PENDING  # the unclaimed record wrote nothing
    finally:
        await store.close()


def test_config_refuses_a_bad_journal_url_or_lease(emu):
    with pytest.raises(ValueError, match="JOURNAL_URL"):
        replace(emulator_config(emu), journal_url="mysql://x")
    with pytest.raises(ValueError, match="LEASE"):
        replace(emulator_config(emu), journal_lease_seconds=0)
    with pytest.raises(ValueError, match="TTL"):
        replace(emulator_config(emu), journal_ttl_seconds=1.0)


async def test_concurrent_calls_on_one_replica_share_one_provider_call(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="shared", chunk_chars=2, event_delay=0.02, reply_delay=0.3)])
    request = keyed()
    answers = await asyncio.gather(
        gw.Generate(pb.GenerateRequest(request=request)),
        gw.Generate(pb.GenerateRequest(request=request)),
        _final_of(gw.StreamGenerate(pb.StreamGenerateRequest(request=request))),
    )
    assert asked(emu) == 1
    assert len({a.response.SerializeToString() for a in answers}) == 1
    assert sorted(a.replayed for a in answers) == [False, True, True]
    for ch in channels:
        await ch.close()


async def _final_of(call) -> pb.GenerateResponse:  # type: ignore[no-untyped-def]
    items = [i async for i in call]
    assert "".join(i.text_delta for i in items) == "shared"
    return items[-1].final


@pytest.mark.postgres
async def test_a_journal_that_is_gone_refuses_keyed_calls_and_asks_nothing(start_server, emu):
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    import asyncpg

    from tests.stores import PG_HOST

    name = f"journal_gone_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        (gw,), channels = await open_gateways(
            start_server, emu, f"postgresql+asyncpg://postgres@{PG_HOST}/{name}"
        )
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # the journal's database is gone
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.Generate(pb.GenerateRequest(request=keyed()))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert reason_of(err.value) == "DEPENDENCY_UNAVAILABLE"
        assert asked(emu) == 0
        with pytest.raises(grpc.aio.AioRpcError) as err:  # nothing marked, and said plainly
            await gw.CancelGenerate(pb.CancelGenerateRequest(idempotency_key="some-key"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert reason_of(err.value) == "DEPENDENCY_UNAVAILABLE"
        assert "not cancelled" in err.value.details() and "asyncpg" not in err.value.details()
        emu.script([Reply(text="unkeyed calls still go")])
        request = keyed()
        request.idempotency_key = ""
        ok = await gw.Generate(pb.GenerateRequest(request=request))
        assert ok.response.content[0].text.text == "unkeyed calls still go"
        for ch in channels:
            await ch.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_cancel_generate_stops_a_keyed_call_on_purpose(start_server, emu, journal_url):
    (gw,), channels = await open_gateways(start_server, emu, journal_url)
    emu.script([Reply(text="y" * 400, chunk_chars=2, event_delay=0.02), Reply(text="asked again")])
    request = keyed()
    call = gw.StreamGenerate(pb.StreamGenerateRequest(request=request))
    async for item in call:
        if item.text_delta:
            break
    stopped = await gw.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=request.idempotency_key))
    assert stopped.canceled
    with pytest.raises(grpc.aio.AioRpcError):
        await asyncio.wait_for(_drain(call), 10)  # its caller is told
    started = time.monotonic()
    while emu.aborted_streams == 0 and time.monotonic() - started < 10:
        await asyncio.sleep(0.02)
    assert emu.aborted_streams == 1  # the provider stream was closed
    # nothing was journaled: the key asks again
    again = await gw.Generate(pb.GenerateRequest(request=request))
    assert asked(emu) == 2 and not again.replayed and again.response.content[0].text.text == "asked again"
    assert not (await gw.CancelGenerate(pb.CancelGenerateRequest(idempotency_key="no-such-key"))).canceled
    for bad, reason in (("", "MISSING_FIELD"), ("x\n", "INVALID_VALUE"), ("k" * 257, "INVALID_VALUE")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=bad))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(err.value) == reason
    for ch in channels:
        await ch.close()


async def _drain(call) -> None:  # type: ignore[no-untyped-def]
    async for _ in call:
        pass


async def test_claim_and_record_wait_for_another_writer_without_blocking_the_loop(tmp_path):
    # The inline path (journal/inline.py) never waits on the loop: with another connection
    # (another replica on the file) holding the write lock, claim and finish go the thread's
    # way, wait for the lock there, and keep their answers (one claim wins, first answer kept).
    path = tmp_path / "gateway.db"
    store = SqlJournalStore(f"sqlite+aiosqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await store.prepare()
        other.execute("BEGIN IMMEDIATE")
        claim = asyncio.ensure_future(store.claim("t", "k", "f", "h", 1000.0, 1010.0))
        await asyncio.sleep(0.05)  # the loop runs on while the claim waits for the lock
        assert not claim.done()
        other.execute("COMMIT")
        row, inserted = await claim
        assert inserted and row.holder == "h" and row.state == State.PENDING
        row, inserted = await store.claim("t", "k", "f", "h2", 1001.0, 1011.0)
        assert not inserted and row.holder == "h"
        other.execute("BEGIN IMMEDIATE")
        finish = asyncio.ensure_future(store.finish("t", "k", b"first", 1002.0))
        await asyncio.sleep(0.05)
        assert not finish.done()
        other.execute("COMMIT")
        assert await finish == b"first"
        assert await store.finish("t", "k", b"second", 1003.0) == b"first"
        row, _ = await store.claim("t", "k", "f", "h3", 1004.0, 1014.0)
        assert row.state == State.DONE and row.response == b"first"
    finally:
        other.close()
        await store.close()


async def test_a_call_that_outlived_its_caller_is_recorded_within_the_drain(emu, tmp_path):
    # The runs replica is gone mid-stream and the gateway is stopped (SIGTERM) while the call
    # still streams: the drain lets it finish and be recorded, so the repeat on the restarted
    # gateway is replayed from the journal, not asked of the provider again. Before, the stop
    # cancelled the call and released its claim: the repeat asked again.
    url = f"sqlite+aiosqlite:///{tmp_path}/gateway.db"
    emu.script([Reply(text="an answer that outlives its caller", chunk_chars=2, event_delay=0.03)])
    request = keyed()
    config = emulator_config(emu, journal_url=url)
    first = build_server(replace(config, server=replace(config.server, grace_seconds=30.0)))
    port = await first.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ModelGatewayServiceStub(channel).StreamGenerate(
            pb.StreamGenerateRequest(request=request)
        )
        async for item in call:
            if item.text_delta:
                call.cancel()  # the caller goes away after its first delta
                break
    await first.stop()  # the call is still streaming (about 0.5 s of deltas left)
    assert asked(emu) == 1

    second = build_server(emulator_config(emu, journal_url=url))
    port = await second.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            gw = pb_grpc.ModelGatewayServiceStub(channel)
            again = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    finally:
        await second.stop(grace=0)
    assert asked(emu) == 1
    assert again[-1].final.replayed
    assert "".join(i.text_delta for i in again) == "an answer that outlives its caller"
