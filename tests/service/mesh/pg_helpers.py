"""What the PostgreSQL pool tests share: ending a backend as a server restart would, counting pings."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from agentrt.mesh.storage import db as dbmod
from tests.stores import PG_DSN


async def terminate_backend(pid: int) -> None:
    """Terminate a backend and return once it has exited (PostgreSQL 14+: the timeout form waits)."""
    admin = await asyncpg.connect(PG_DSN)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
    finally:
        await admin.close()


def count_pings(database: dbmod.Database, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the pool's pings from now on (one element per ping sent)."""
    pings: list[int] = []
    dialect = database._write_engine.sync_engine.dialect
    real = dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return bool(real(dbapi_connection))

    monkeypatch.setattr(dialect, "do_ping", counted)
    return pings
