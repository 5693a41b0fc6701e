"""PostgreSQL pool: a connection that sat idle is pinged at checkout and replaced when dead.

mesh/storage/pg_pool.py pings a pooled connection only when it was idle past PING_IDLE_S (a ping at
every checkout cost three round trips per transaction, decision 0025). A real PostgreSQL
backend is terminated (`pg_terminate_backend`, what a server restart or a proxy's drop
does) while its connection sits in the pool: past the idle bound the next transaction is
served on a new connection without an error. Within it nothing is sent before the
transaction; a close the driver saw is caught without a round trip
(test_db_stale_connections.py).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from agentrt.mesh.storage import db as dbmod
from agentrt.mesh.storage import pg_pool
from tests.needs import unavailable
from tests.service.mesh.pg_helpers import count_pings, terminate_backend
from tests.stores import PG_URL, pg_reachable


async def _backend_pid(database: dbmod.Database) -> int:
    async with database.read() as conn:
        return int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))


@pytest.fixture
async def database():
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    database = dbmod.Database(PG_URL, pool_size=1, max_overflow=0)
    yield database
    await database.close()


async def test_an_idle_dead_connection_is_replaced_at_checkout(database, monkeypatch):
    monkeypatch.setattr(pg_pool, "PING_IDLE_S", 0.0)  # every checkout counts as after a long idle
    pings = count_pings(database, monkeypatch)
    first = await _backend_pid(database)
    await terminate_backend(first)
    second = await _backend_pid(database)  # no error: found dead, replaced
    assert second != first
    await _backend_pid(database)
    assert pings  # an idle connection the driver still thinks open is pinged


async def test_a_recently_used_connection_is_not_pinged(database, monkeypatch):
    monkeypatch.setattr(pg_pool, "PING_IDLE_S", 3600.0)
    pings = count_pings(database, monkeypatch)
    pids = {await _backend_pid(database) for _ in range(5)}
    assert len(pids) == 1 and pings == []  # one connection, used as is: no round trip added
