"""The database engine factory every service that owns data uses (SQLAlchemy 2 async).

`Database(url)` opens the engine for SQLite (aiosqlite) or PostgreSQL (asyncpg):
- SQLite: WAL journal, a busy timeout, foreign keys on; writes go through one connection
  in `BEGIN IMMEDIATE` transactions serialized by an asyncio lock, so two writers never
  interleave (seq minting stays atomic) and never fail on a lock upgrade; reads use a
  separate pool and see the last committed state.
- PostgreSQL: one pool; `write()` is an ordinary transaction (services add advisory locks
  where they mint sequence numbers).
`write()` and `read()` yield an AsyncConnection inside a transaction that commits on exit
and rolls back on error: one database transaction per save point.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import MetaData, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine


def sqlite_url(state_dir: str, name: str) -> str:
    """Return the embedded default URL for a service: sqlite+aiosqlite:///<state_dir>/<name>.db."""
    return f"sqlite+aiosqlite:///{os.path.abspath(os.path.join(state_dir, name + '.db'))}"


def _sqlite_pragmas(engine: AsyncEngine, immediate: bool) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """An async database for one service (see the module docstring)."""

    def __init__(self, url: str) -> None:
        """Open engines for url (nothing connects until first use).

        Raises:
            ValueError: the URL's driver is neither sqlite+aiosqlite nor postgresql+asyncpg.
        """
        parsed = make_url(url)
        self.url = url
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
            self._write_engine = create_async_engine(url)
            self._read_engine = create_async_engine(url)
            _sqlite_pragmas(self._write_engine, immediate=True)
            _sqlite_pragmas(self._read_engine, immediate=False)
        elif self.dialect == "postgresql":
            self._write_engine = create_async_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)
            self._read_engine = self._write_engine
        else:
            raise ValueError(f"unsupported database URL {url!r}: use sqlite+aiosqlite or postgresql+asyncpg")
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded SQLite backend."""
        return self.dialect == "sqlite"

    async def create_all(self, metadata: MetaData) -> None:
        """Create the tables of metadata that do not exist yet."""
        async with self.write() as conn:
            await conn.run_sync(metadata.create_all)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """Yield a connection in a writing transaction; commit on exit, roll back on error."""
        if self._write_lock is None:
            async with self._write_engine.begin() as conn:
                yield conn
            return
        async with self._write_lock, self._write_engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """Yield a connection in a read transaction."""
        async with self._read_engine.begin() as conn:
            yield conn

    async def close(self) -> None:
        """Dispose of the engines."""
        await self._write_engine.dispose()
        if self._read_engine is not self._write_engine:
            await self._read_engine.dispose()
