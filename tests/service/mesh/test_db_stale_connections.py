"""PostgreSQL pool: a connection the server closed is never handed out again (decision 0044).

A real backend is terminated (`pg_terminate_backend`: what a server restart, a failover or
an operator's kill does) and the next operations must be served on a new connection:

- a connection whose driver saw the close is replaced at checkout without a round trip, however
  recently it was used (the idle ping, test_db_idle_ping.py, is for closes nobody saw);
- one that broke under `autocommit()`'s or `driver()`'s raw-driver statements (the hot
  one-statement paths: `runs_save`, `sessions_append`, the tool journal) does not go back to
  the pool;
- a transaction body (`write_tx`, `write_sync`, `read_tx`) whose connection was lost before
  COMMIT was sent runs once more on a fresh connection; its writes land once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from agentrt.mesh.storage import db as dbmod
from agentrt.mesh.storage import pg_pool
from tests.needs import unavailable
from tests.service.mesh.pg_helpers import count_pings, terminate_backend
from tests.stores import PG_DSN, PG_URL, pg_reachable


@asynccontextmanager
async def _on_driver(database: dbmod.Database, form: str) -> AsyncIterator[Any]:
    """The asyncpg connection as a hot path gets it: `autocommit()`'s, or `driver()`'s."""
    if form == "driver":
        async with database.driver() as driver:
            yield driver
        return
    async with database.autocommit() as conn:
        yield (await conn.get_raw_connection()).driver_connection


async def _raw(database: dbmod.Database, form: str = "autocommit") -> tuple[int, Any]:
    """(pg_backend_pid(), the asyncpg connection), sent as the hot paths send a statement:
    outside a transaction, on the driver's connection."""
    async with _on_driver(database, form) as driver:
        return int(await driver.fetchval("SELECT pg_backend_pid()")), driver


async def _raw_pid(database: dbmod.Database) -> int:
    return (await _raw(database))[0]


@pytest.fixture
async def database():
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    database = dbmod.Database(PG_URL, pool_size=2, max_overflow=0)
    yield database
    await database.close()


@pytest.fixture
async def table(database):
    name = f"stale_{uuid.uuid4().hex[:10]}"
    async with database.write() as conn:
        await conn.execute(sa.text(f"CREATE TABLE {name} (id int PRIMARY KEY, note text)"))
    yield name
    async with database.write() as conn:
        await conn.execute(sa.text(f"DROP TABLE {name}"))


@pytest.mark.parametrize("form", ["autocommit", "driver"])
async def test_a_connection_terminated_mid_statement_does_not_go_back_to_the_pool(database, form):
    first = (await _raw(database, form))[0]

    async def sleeping() -> None:
        async with _on_driver(database, form) as driver:
            await driver.fetchval("SELECT pg_sleep(30)")

    slow = asyncio.create_task(sleeping())
    admin = await asyncpg.connect(PG_DSN)
    try:
        while not await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'SELECT pg_sleep%'", first
        ):
            await asyncio.sleep(0.01)
        await admin.execute("SELECT pg_terminate_backend($1)", first)
    finally:
        await admin.close()
    with pytest.raises(Exception, match="closed"):
        await slow
    # every later statement, on every pooled connection in turn, is served: none is the dead one
    pids = [await _raw_pid(database) for _ in range(6)]
    assert first not in pids


@pytest.mark.parametrize("form", ["autocommit", "driver"])
async def test_a_connection_terminated_in_the_pool_is_replaced_without_a_ping(database, monkeypatch, form):
    monkeypatch.setattr(pg_pool, "PING_IDLE_S", 3600.0)  # recently used: no ping would be sent
    pings = count_pings(database, monkeypatch)
    first, driver = await _raw(database, form)
    await terminate_backend(first)

    async def seen_closed() -> None:
        while not driver.is_closed():  # the client reads the server's close on its event loop
            await asyncio.sleep(0.01)

    await asyncio.wait_for(seen_closed(), 10)
    second = (await _raw(database, form))[0]  # no error: the driver knew it closed, the pool replaced it
    async with database.read() as conn:
        third = int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))
    assert first not in (second, third)
    assert pings == []  # the check is the driver's own flag, not a round trip


async def test_a_write_whose_connection_was_lost_before_commit_runs_once_more(database, table):
    runs: list[int] = []

    async def body(conn: Any) -> int:
        runs.append(1)
        pid = int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))
        await conn.execute(sa.text(f"INSERT INTO {table} VALUES (1, 'once')"))
        if len(runs) == 1:
            await terminate_backend(pid)  # the server ends the transaction: nothing of it committed
        await conn.execute(sa.text(f"UPDATE {table} SET note = note || '!' WHERE id = 1"))
        return pid

    pid = await database.write_tx(body)
    assert len(runs) == 2
    async with database.read() as conn:
        rows = (await conn.execute(sa.text(f"SELECT id, note FROM {table}"))).all()
    assert [tuple(r) for r in rows] == [(1, "once!")]
    assert await _raw_pid(database) != 0 and pid > 0


async def test_a_sync_write_whose_connection_was_lost_before_commit_runs_once_more(database, table):
    runs: list[int] = []
    loop = asyncio.get_running_loop()

    def body(conn: Any) -> None:
        runs.append(1)
        conn.execute(sa.text(f"INSERT INTO {table} VALUES (2, 'sync')"))
        if len(runs) == 1:
            pid = int(conn.scalar(sa.text("SELECT pg_backend_pid()")))
            # fn runs on the loop's greenlet bridge (run_sync): terminate through a thread
            asyncio.run_coroutine_threadsafe(terminate_backend(pid), loop)  # noqa: RUF006 - waited below
            while conn.scalar(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}):
                pass  # the next statement meets the terminated backend

    await database.write_sync(body)
    assert len(runs) == 2
    async with database.read() as conn:
        assert (await conn.execute(sa.text(f"SELECT id, note FROM {table}"))).all() == [(2, "sync")]


async def test_a_lost_connection_is_retried_once_only(database, table):
    runs: list[int] = []

    async def body(conn: Any) -> None:
        runs.append(1)
        pid = int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))
        await terminate_backend(pid)  # every time: the second loss is the caller's to handle
        await conn.execute(sa.text(f"INSERT INTO {table} VALUES (3, 'never')"))

    with pytest.raises(sa.exc.DBAPIError) as err:
        await database.write_tx(body)
    assert err.value.connection_invalidated
    assert len(runs) == 2
    async with database.read() as conn:
        assert (await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar() == 0


async def test_other_failures_are_not_run_again(database, table):
    runs: list[int] = []

    async def body(conn: Any) -> None:
        runs.append(1)
        await conn.execute(sa.text(f"INSERT INTO {table} VALUES (4, 'a')"))
        await conn.execute(sa.text(f"INSERT INTO {table} VALUES (4, 'b')"))  # a constraint

    with pytest.raises(sa.exc.IntegrityError):
        await database.write_tx(body)
    assert len(runs) == 1


async def test_a_driver_statement_commits_alone_and_a_failure_leaves_the_connection_usable(database, table):
    async with database.driver() as driver:
        pid = int(await driver.fetchval("SELECT pg_backend_pid()"))
        await driver.execute(f"INSERT INTO {table} VALUES (5, 'alone')")
        async with database.read() as conn:  # another connection sees it before the block ends
            assert (await conn.execute(sa.text(f"SELECT note FROM {table} WHERE id = 5"))).scalar() == "alone"
        with pytest.raises(asyncpg.UniqueViolationError):
            await driver.execute(f"INSERT INTO {table} VALUES (5, 'twice')")
        assert not driver.is_in_transaction() and not driver.is_closed()
    # the connection went back to the pool (not dropped): every later checkout is one of the two
    pids = {(await _raw(database, "driver"))[0] for _ in range(4)}
    assert pid in pids and len(pids) <= 2
    async with database.driver() as driver:
        assert not driver.is_in_transaction()
        await driver.execute(f"INSERT INTO {table} VALUES (6, 'next')")
    async with database.read() as conn:
        rows = (await conn.execute(sa.text(f"SELECT id, note FROM {table} ORDER BY id"))).all()
    assert [tuple(r) for r in rows] == [(5, "alone"), (6, "next")]


async def test_driver_is_for_postgresql_only(tmp_path):
    lite = dbmod.Database(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(RuntimeError, match="PostgreSQL"):
            async with lite.driver():
                pass
    finally:
        await lite.close()
