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

`write_sync(fn)` and `read_sync(fn)` run `fn(Connection)` as one whole transaction, for
hot paths. On SQLite each awaited statement of `write()` is a hop to aiosqlite's thread
and back (about 0.3 ms under load); these run the transaction on a thread of their own
with the stdlib driver, one hop per transaction. Writes share `write()`'s lock and go
through one thread, so writers stay serialized. On PostgreSQL they are `write()`/`read()`
with `run_sync` (asyncpg is already asynchronous).

On SQLite each transaction thread keeps one connection open for its life (a transaction
is a BEGIN and a COMMIT on it), instead of a pool checkout and its reset-on-return rollback
per transaction.

`write_tx(body)` and `read_tx(body)` do the same for an async transaction body written
against AsyncConnection (`await conn.execute(...)`), so existing store code keeps one
form: on SQLite the body is driven to completion on the transaction thread over a
synchronous connection (it must await nothing but the connection); elsewhere it simply
runs inside `write()`/`read()`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, MetaData, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from agentrt.mesh.transient import retry_transient


def sqlite_url(state_dir: str, name: str) -> str:
    """Return the embedded default URL for a service: sqlite+aiosqlite:///<state_dir>/<name>.db."""
    return f"sqlite+aiosqlite:///{os.path.abspath(os.path.join(state_dir, name + '.db'))}"


T = TypeVar("T")
#: Threads running read_sync transactions on SQLite (WAL readers do not block each other).
SYNC_READ_THREADS = 4


def _sqlite_pragmas(engine: Engine, immediate: bool) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """An async database for one service (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        connect_args: dict[str, Any] | None = None,
        pool_size: int = 10,
        max_overflow: int = 10,
    ) -> None:
        """Open engines for url (nothing connects until first use).

        Args:
            url: sqlite+aiosqlite:///FILE or postgresql+asyncpg://...
            connect_args: extra keyword arguments of the PostgreSQL driver's connect
                (asyncpg: e.g. `timeout`, `command_timeout`, in seconds); unused on SQLite.
            pool_size: PostgreSQL connections kept open; unused on SQLite.
            max_overflow: PostgreSQL connections opened beyond pool_size under load.

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
            _sqlite_pragmas(self._write_engine.sync_engine, immediate=True)
            _sqlite_pragmas(self._read_engine.sync_engine, immediate=False)
            sync_url = parsed.set(drivername="sqlite+pysqlite")
            args = {"check_same_thread": False}
            self._sync_write: Engine | None = create_engine(sync_url, connect_args=args)
            self._sync_read: Engine | None = create_engine(sync_url, connect_args=args)
            _sqlite_pragmas(self._sync_write, immediate=True)
            _sqlite_pragmas(self._sync_read, immediate=False)
            self._write_pool: ThreadPoolExecutor | None = ThreadPoolExecutor(1, "db-write")
            self._read_pool: ThreadPoolExecutor | None = ThreadPoolExecutor(SYNC_READ_THREADS, "db-read")
        elif self.dialect == "postgresql":
            self._write_engine = create_async_engine(
                url,
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_pre_ping=True,
                connect_args=dict(connect_args or {}),
            )
            self._read_engine = self._write_engine
            self._sync_write = self._sync_read = None
            self._write_pool = self._read_pool = None
        else:
            raise ValueError(f"unsupported database URL {url!r}: use sqlite+aiosqlite or postgresql+asyncpg")
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        #: Each transaction thread's own connection (SQLite). They are not closed by
        #: `close()`, which must not wait for a thread still in a transaction (it would block
        #: the event loop): a thread's connection goes with the thread, which ends once idle
        #: after the pools' shutdown.
        self._thread_local = threading.local()

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
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """Yield a PostgreSQL connection outside any transaction: each statement commits alone.

        For hot one-statement operations whose locks must not outlive the statement (a
        transaction's COMMIT is another round trip, during which its row locks stay held).

        Raises:
            RuntimeError: on SQLite (its writes must go through `write()`'s lock).
        """
        if self._write_lock is not None:
            raise RuntimeError("autocommit() is for PostgreSQL; SQLite writes go through write()")
        async with self._write_engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """Yield a connection in a read transaction."""
        async with self._read_engine.begin() as conn:
            yield conn

    async def write_sync(self, fn: Callable[[Connection], T]) -> T:
        """Run fn(connection) as one writing transaction; commit on return, roll back on error.

        fn must not touch the event loop (on SQLite it runs on another thread). Serialized
        with `write()`.

        Returns:
            What fn returned.
        """
        if self._sync_write is None or self._write_pool is None:
            async with self.write() as conn:
                return await conn.run_sync(fn)
        engine = self._sync_write

        def transaction() -> T:
            conn = self._thread_conn(engine, "write")
            with conn.begin():
                return fn(conn)

        assert self._write_lock is not None
        async with self._write_lock:
            return await asyncio.get_running_loop().run_in_executor(self._write_pool, transaction)

    async def read_sync(self, fn: Callable[[Connection], T]) -> T:
        """Run fn(connection) in one read transaction and return its result (see write_sync).

        On PostgreSQL a transient failure (a terminated or reset connection, mesh/transient.py)
        runs the read again, with bounded backoff: a read changes nothing, so it is safe to repeat.
        """
        if self._sync_read is None or self._read_pool is None:

            async def once() -> T:
                async with self.read() as conn:
                    return await conn.run_sync(fn)

            return await retry_transient(once, what="read")
        engine = self._sync_read

        def transaction() -> T:
            conn = self._thread_conn(engine, "read")
            with conn.begin():
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self._read_pool, transaction)

    def _thread_conn(self, engine: Engine, role: str) -> Connection:
        """Return this transaction thread's own connection to engine (opened on first use)."""
        conn: Connection | None = getattr(self._thread_local, role, None)
        if conn is None or conn.closed or conn.invalidated:
            conn = engine.connect()
            setattr(self._thread_local, role, conn)
        return conn

    async def write_tx(self, body: Callable[[AsyncConnection], Coroutine[Any, Any, T]]) -> T:
        """Run `await body(conn)` as one writing transaction (see the module docstring).

        Raises:
            Whatever body raises (the transaction is rolled back).
        """
        if self._sync_write is None:
            async with self.write() as conn:
                return await body(conn)
        return await self.write_sync(lambda conn: _drive(body(_SyncBacked(conn))))  # type: ignore[arg-type]

    async def read_tx(self, body: Callable[[AsyncConnection], Coroutine[Any, Any, T]]) -> T:
        """Run `await body(conn)` in one read transaction (see write_tx)."""
        if self._sync_read is None:
            async with self.read() as conn:
                return await body(conn)
        return await self.read_sync(lambda conn: _drive(body(_SyncBacked(conn))))  # type: ignore[arg-type]

    async def close(self) -> None:
        """Dispose of the engines and stop the transaction threads."""
        await self._write_engine.dispose()
        if self._read_engine is not self._write_engine:
            await self._read_engine.dispose()
        for pool in (self._write_pool, self._read_pool):
            if pool is not None:
                pool.shutdown(wait=False)
        for engine in (self._sync_write, self._sync_read):
            if engine is not None:
                engine.dispose()


class _SyncBacked:
    """The AsyncConnection methods store code awaits, answered at once by a sync Connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def execute(self, statement: Any, parameters: Any = None, **kw: Any) -> Any:
        return self._conn.execute(statement, parameters, **kw)

    async def scalar(self, statement: Any, parameters: Any = None, **kw: Any) -> Any:
        return self._conn.scalar(statement, parameters, **kw)

    async def scalars(self, statement: Any, parameters: Any = None, **kw: Any) -> Any:
        return self._conn.scalars(statement, parameters, **kw)

    async def exec_driver_sql(self, statement: str, parameters: Any = None, **kw: Any) -> Any:
        return self._conn.exec_driver_sql(statement, parameters, **kw)

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return fn(self._conn, *args, **kw)

    @property
    def dialect(self) -> Any:
        return self._conn.dialect


def _drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (it awaits only _SyncBacked) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a database transaction body awaited something other than its connection")
