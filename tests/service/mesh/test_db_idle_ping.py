"""PostgreSQL pool: a connection that sat idle is pinged at checkout and replaced when dead.

mesh.db pings a pooled connection only when it was idle past PING_IDLE_S (a ping at every
checkout cost three round trips per transaction). A real PostgreSQL backend is terminated
(`pg_terminate_backend`, what a server restart or a proxy's drop does) while its connection
sits in the pool: past the idle bound the next transaction is served on a new connection
without an error; within it (no ping) the transaction meets the dead connection, which is
what the transient retries above the pool exist for.
"""

from __future__ import annotations

import asyncpg
import pytest
import sqlalchemy as sa

from agentrt.mesh import db as dbmod
from tests.needs import unavailable
from tests.stores import PG_DSN, PG_URL, pg_reachable


async def _backend_pid(database: dbmod.Database) -> int:
    async with database.read() as conn:
        return int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))


async def _terminate(pid: int) -> None:
    admin = await asyncpg.connect(PG_DSN)
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


@pytest.fixture
async def database():
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    database = dbmod.Database(PG_URL, pool_size=1, max_overflow=0)
    yield database
    await database.close()


async def test_an_idle_dead_connection_is_replaced_at_checkout(database, monkeypatch):
    monkeypatch.setattr(dbmod, "PING_IDLE_S", 0.0)  # every checkout counts as after a long idle
    first = await _backend_pid(database)
    await _terminate(first)
    second = await _backend_pid(database)  # no error: pinged, found dead, replaced
    assert second != first


async def test_a_recently_used_connection_is_not_pinged(database, monkeypatch):
    monkeypatch.setattr(dbmod, "PING_IDLE_S", 3600.0)
    first = await _backend_pid(database)
    await _terminate(first)
    with pytest.raises(sa.exc.DBAPIError):  # used as is: the dead connection fails the transaction
        await _backend_pid(database)
    assert await _backend_pid(database) != first  # and the pool replaced it afterwards
