"""Transient database failures at the save point are retried, once in effect (issue 13).

On PostgreSQL, while a run of several tool turns executes, the connection of a save point
in flight is terminated again and again (`pg_terminate_backend`, what a failover or an
operator's kill does). The run still completes, its log holds each transition once, and the
session holds each entry once; the runs service logged the retries (so the connections
really broke under it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter

import asyncpg
import grpc
import pytest

from agentrt.mesh.storage.db import Database
from agentrt.mesh.storage.transient import is_transient
from agentrt.runs.domain import RunRecord
from agentrt.runs.storage import pg as store_pg
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs import harness
from tests.service.runs.harness import WAIT_S, agent, start_mesh

TURNS = 5


async def _terminate_in_flight(database: str, run_id: str, hits: list[int], outages: int = 3) -> None:
    """Terminate the runs service's connection while it is inside a save point, `outages` times.

    A connection terminated while idle in the pool is replaced at its next checkout (the
    pool pings it) and nobody sees an error; one terminated mid-save fails that save point,
    which is what it must survive. A save point is one short statement on PostgreSQL (the
    `runs_save` call, runs migration 0004), so the test holds the run's row locked from a
    transaction of its own until the next save point waits on it inside its statement (the
    call, or the fenced UPDATE of the SQLAlchemy path), terminates that connection, and lets
    the row go. Each outage is followed by a pause, so the retries have a database to retry
    against.
    """
    server = harness.pg_server().replace("postgresql+asyncpg", "postgresql")
    admin = await asyncpg.connect(server + "/postgres")
    holder = await asyncpg.connect(f"{server}/{database}")
    try:
        while len(hits) < outages:
            async with holder.transaction():
                await holder.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE", run_id)
                for _ in range(400):  # about 2 s; then the row is let go and taken again
                    killed = await admin.fetchval(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 "
                        "AND wait_event_type = 'Lock' AND pid <> $2 AND (query LIKE 'SELECT runs_save(%' "
                        "OR query LIKE 'UPDATE runs SET%update_time_s%')",
                        database,
                        holder.get_server_pid(),
                    )
                    if killed:
                        hits.append(int(killed))
                        break
                    await asyncio.sleep(0.005)
            await asyncio.sleep(0.3)
    finally:
        await holder.close()
        await admin.close()


async def _finished(mesh, run_id: str) -> pb.Run:
    """GetRun until the run ends; a read that meets a terminated connection is asked again."""
    while True:
        try:
            run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
        except grpc.aio.AioRpcError:
            run = None  # GetRun may meet a terminated connection too; ask again
        if run is not None and run.status in (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED):
            return run
        await asyncio.sleep(0.05)


@pytest.mark.postgres
async def test_a_run_completes_through_terminated_connections(start_server, tmp_path, emulator, caplog):
    caplog.set_level(logging.WARNING, logger="agentrt.mesh.db")
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True)
    database = next(n for n in harness._PG_DATABASES if n.startswith("runs_test"))
    replies: list[Reply] = [
        Reply(
            text=f"turn {t}",
            tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": f"echo line-{t} >> lines.txt"}))],
            chunk_chars=3,
            event_delay=0.02,
        )
        for t in range(1, TURNS)
    ]
    emulator.script([*replies, Reply(text="all done", chunk_chars=3, event_delay=0.02)])
    workspace = f"{mesh.work}/transient"
    hits: list[int] = []
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="write the lines", workspace=workspace)
    )
    breaker = asyncio.create_task(_terminate_in_flight(database, started.run_id, hits))
    try:
        run = await asyncio.wait_for(_finished(mesh, started.run_id), WAIT_S * 2)
    finally:
        breaker.cancel()
        await asyncio.gather(breaker, return_exceptions=True)
    assert sum(hits) > 0, "no connection was terminated: the test proves nothing"
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "all done" and run.turns == TURNS
    retried = [r for r in caplog.records if "save point of run" in r.getMessage()]
    assert retried, "no save point met a broken connection"

    store = RunStore(Database(f"{harness.pg_server()}/{database}"))
    try:
        log = await store.read_log(started.run_id)
    finally:
        await store.db.close()
    seqs = [seq for seq, _, _ in log]
    assert seqs == sorted(set(seqs))
    # each transition once: no (kind, payload) twice, one model response per turn
    twice = [
        k for k, n in Counter((kind, json.dumps(p, sort_keys=True)) for _, kind, p in log).items() if n > 1
    ]
    assert twice == [], twice
    responded = Counter(p.get("turn") for _, kind, p in log if kind == "model_responded")
    assert responded == Counter(range(1, TURNS + 1)), responded
    entries = await mesh.entries(started.session_id)
    ids = [e.entry_id for e in entries]
    assert len(ids) == len(set(ids))
    calls = [e.item.tool_call.call_id for e in entries if e.item.HasField("tool_call")]
    assert len(calls) == len(set(calls)) == TURNS - 1
    with open(f"{workspace}/lines.txt") as f:
        assert f.read().split() == [f"line-{t}" for t in range(1, TURNS)]
    assert len([p for p, _ in emulator.requests if p == "/v1/responses"]) == TURNS


@pytest.mark.postgres
async def test_what_is_transient_and_what_is_not(tmp_path):
    """Real errors of a real PostgreSQL: a terminated backend is transient, a bad statement is not."""
    await harness.require_pg()
    from sqlalchemy import text

    url = await harness.fresh_pg_database(harness.pg_server(), "transient_test")
    db = Database(url)
    name = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(
        harness.pg_server().replace("postgresql+asyncpg", "postgresql") + "/postgres"
    )
    try:
        with pytest.raises(Exception) as err:
            async with db.write() as conn:
                await conn.execute(text("SELECT 1"))
                await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1", name
                )
                await conn.execute(text("SELECT 2"))
        assert is_transient(err.value), repr(err.value)
        with pytest.raises(Exception) as err:
            async with db.write() as conn:
                await conn.execute(text("SELECT * FROM no_such_table"))
        assert not is_transient(err.value), repr(err.value)
    finally:
        await admin.close()
        await db.close()


@pytest.fixture(params=harness.STORE_BACKENDS)
async def store(request, tmp_path):
    async with harness.open_run_store(request.param, str(tmp_path), "runs_transient") as runs:
        yield runs


def _record(run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id, tenant="t", session_id=f"s-{run_id}", agent_name="a", agent_version=1,
        agent=pb.AgentSpec(name="a"), input="go", lease_owner="a", lease_expires_s=time.time() + 60,
        fencing_token=1,
    )  # fmt: skip


def _break_once(store: RunStore, after_commit: bool, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the next save attempt fail like a connection reset: before or after its commit.

    The attempt is the SQLite transaction (`write_sync`) or, on PostgreSQL, the one call of
    `runs_save` (runs/storage/pg.py `save`).
    """
    calls: list[int] = []

    def flaky(real):  # type: ignore[no-untyped-def]
        async def attempt(*args, **kw):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 1:
                if after_commit:
                    await real(*args, **kw)  # it landed; the answer is lost on the way back
                raise ConnectionResetError("connection reset by peer")
            return await real(*args, **kw)

        return attempt

    if store.db.is_sqlite:
        monkeypatch.setattr(store.db, "write_sync", flaky(store.db.write_sync))
    else:
        monkeypatch.setattr(store_pg, "save", flaky(store_pg.save))
    return calls


@pytest.mark.parametrize("after_commit", [False, True], ids=["before-commit", "lost-commit-answer"])
async def test_a_save_point_is_retried_and_lands_once(store: RunStore, after_commit: bool, monkeypatch):
    await store.insert_run(_record("r1"), [])
    calls = _break_once(store, after_commit, monkeypatch)
    saved = await store.save("r1", changes={"turns": 1}, log=[("model_responded", {"turn": 1})], token=1)
    assert saved is not None
    assert len(calls) == (1 if after_commit else 2)  # a commit on record is not run again
    log = await store.read_log("r1")
    assert [kind for _, kind, _ in log] == ["started", "model_responded"]
    run = await store.get_run("r1")
    assert run is not None and run.turns == 1


async def test_a_fencing_refusal_is_not_retried(store: RunStore, monkeypatch):
    await store.insert_run(_record("r2"), [])
    assert await store.acquire_lease("r2", "b", 30) is None  # a holds a live lease
    calls = _break_once(store, after_commit=False, monkeypatch=monkeypatch)
    # a transient failure first, then the guard: the retry meets the refusal and stops there
    assert await store.save("r2", log=[("turn", {})], token=7) is None
    assert len(calls) == 2
    assert [kind for _, kind, _ in await store.read_log("r2")] == ["started"]


@pytest.mark.postgres
async def test_a_serialization_failure_and_a_deadlock_are_transient():
    """Real 40001 and 40P01 from PostgreSQL, through SQLAlchemy, are classified transient."""
    await harness.require_pg()
    from sqlalchemy import text

    url = await harness.fresh_pg_database(harness.pg_server(), "transient_test")
    db = Database(url)
    try:
        async with db.write() as conn:
            await conn.execute(text("CREATE TABLE t (id int PRIMARY KEY, v int)"))
            await conn.execute(text("INSERT INTO t VALUES (1, 0), (2, 0)"))
        # serialization failure: two SERIALIZABLE transactions update the row the other read
        a = await db._write_engine.connect()
        b = await db._write_engine.connect()
        try:
            for conn in (a, b):
                await conn.execute(text("BEGIN ISOLATION LEVEL SERIALIZABLE"))
                await conn.execute(text("SELECT sum(v) FROM t"))
            await a.execute(text("UPDATE t SET v = 1 WHERE id = 1"))
            await b.execute(text("UPDATE t SET v = 1 WHERE id = 2"))
            await a.execute(text("COMMIT"))
            with pytest.raises(Exception) as err:
                await b.execute(text("COMMIT"))
            assert is_transient(err.value), repr(err.value)
        finally:
            await a.close()
            await b.close()
        # deadlock: each holds one row and waits for the other's
        a = await db._write_engine.connect()
        b = await db._write_engine.connect()
        try:
            for conn in (a, b):
                await conn.execute(text("BEGIN"))
            await a.execute(text("UPDATE t SET v = 2 WHERE id = 1"))
            await b.execute(text("UPDATE t SET v = 2 WHERE id = 2"))
            results = await asyncio.gather(
                a.execute(text("UPDATE t SET v = 3 WHERE id = 2")),
                b.execute(text("UPDATE t SET v = 3 WHERE id = 1")),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(errors) == 1 and is_transient(errors[0]), results
        finally:
            await a.close()
            await b.close()
    finally:
        await db.close()
