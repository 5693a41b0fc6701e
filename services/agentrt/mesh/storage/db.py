"""The database engine factory every service that owns data uses (SQLAlchemy 2 async).

`Database(url)` opens the engine for SQLite (aiosqlite) or PostgreSQL (asyncpg):
- SQLite: WAL journal, a busy timeout, foreign keys on; writes go through one connection
  in `BEGIN IMMEDIATE` transactions serialized by an asyncio lock, so two writers never
  interleave (seq minting stays atomic) and never fail on a lock upgrade; reads use a
  separate pool and see the last committed state.
- PostgreSQL: one pool, which never hands out a connection the server closed (mesh/storage/pg_pool.py,
  decision 0044: the driver's own flag at checkout, a ping only after sitting idle); `write()`
  is an ordinary transaction (services add advisory locks where they mint sequence numbers).
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

On a SQLite file, `write_sync`/`read_sync` first run the transaction inline: on the calling
thread (the event loop), on a connection kept for that thread, with `busy_timeout=0`
(decision 0023, the generalisation of decision 0022). The hop to a transaction thread and
back (the executor's submit, the future's wake-up of the loop) cost more than the short
statements of a hot path. The loop never waits on a lock: when another connection holds it
(`write()`'s aiosqlite transaction, a transaction thread, another process on the file),
BEGIN fails at once with SQLITE_BUSY and the transaction runs on its thread as before,
waiting there. A write that finds `write()`'s lock held goes to its thread directly, in
turn. So a body must be short and must not block (it runs on the loop); one that may take
long (a big read, a wait) passes `offload=True`. Atomicity is the database's, as before: one
BEGIN IMMEDIATE ... COMMIT per write, and writers of this process stay serialized (an
inline write runs only while no other holds the lock, and nothing else runs on the loop
while it does). Now and then a commit also runs SQLite's automatic WAL checkpoint on the loop.

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
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, Engine, MetaData, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.util import greenlet_spawn

from agentrt.mesh.storage import pg_pool
from agentrt.mesh.storage.sqlite_file import prepare_directory
from agentrt.mesh.storage.transient import retry_transient


def sqlite_url(state_dir: str, name: str) -> str:
    """Return the embedded default URL for a service: sqlite+aiosqlite:///<state_dir>/<name>.db."""
    return f"sqlite+aiosqlite:///{os.path.abspath(os.path.join(state_dir, name + '.db'))}"


T = TypeVar("T")
#: Threads running read_sync transactions on SQLite (WAL readers do not block each other).
SYNC_READ_THREADS = 4


#: SQLite's primary result codes for a lock another connection holds.
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def lock_taken(exc: BaseException) -> bool:
    """Whether SQLite refused because another connection holds a lock (SQLITE_BUSY/LOCKED).

    Takes the driver's sqlite3.OperationalError or SQLAlchemy's wrapper of it. Python reports
    the extended result code (e.g. SQLITE_BUSY_RECOVERY, 261, while a WAL is recovered after
    a crash); its low byte is the primary code.
    """
    code = getattr(getattr(exc, "orig", exc), "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)


def _sqlite_pragmas(engine: Engine, immediate: bool, busy_timeout_ms: int = 10_000) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
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
            DatabasePathError: a SQLite file whose directory cannot be created or written
                (mesh/storage/sqlite_file.py; an OSError naming the file).
        """
        parsed = make_url(url)
        self.url = url
        self._inline_write: Engine | None = None
        self._inline_read: Engine | None = None
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                prepare_directory(parsed.database)
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
            if parsed.database and parsed.database != ":memory:":
                # The inline connections: the same file, but a lock held elsewhere fails at once.
                self._inline_write = create_engine(sync_url, connect_args=args)
                self._inline_read = create_engine(sync_url, connect_args=args)
                _sqlite_pragmas(self._inline_write, immediate=True, busy_timeout_ms=0)
                _sqlite_pragmas(self._inline_read, immediate=False, busy_timeout_ms=0)
            self._write_pool: ThreadPoolExecutor | None = ThreadPoolExecutor(1, "db-write")
            self._read_pool: ThreadPoolExecutor | None = ThreadPoolExecutor(SYNC_READ_THREADS, "db-read")
        elif self.dialect == "postgresql":
            self._write_engine = create_async_engine(
                url,
                pool_size=pool_size,
                max_overflow=max_overflow,
                connect_args=dict(connect_args or {}),
            )
            pg_pool.guard_checkout(self._write_engine.sync_engine)
            self._read_engine = self._write_engine
            self._sync_write = self._sync_read = None
            self._write_pool = self._read_pool = None
        else:
            raise ValueError(f"unsupported database URL {url!r}: use sqlite+aiosqlite or postgresql+asyncpg")
        #: Transactions that ran inline, and those an inline attempt handed to a thread
        #: because another connection held the lock (tests and operators).
        self.inline_transactions = 0
        self.inline_fallbacks = 0
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        #: Each transaction thread's own connection (SQLite). They are not closed by
        #: `close()`, which must not wait for a thread still in a transaction (it would block
        #: the event loop): a thread's connection goes with the thread, which ends once idle
        #: after the pools' shutdown.
        self._thread_local = threading.local()
        #: The inline connections, per calling thread (in practice the event loop's).
        self._inline_local = threading.local()

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
        A connection the driver found closed on the way (callers send statements on the
        asyncpg connection itself, past SQLAlchemy's disconnect handling) is dropped, not
        returned to the pool (decision 0044). A failed statement is not run again here: its
        outcome may be unknown, which only the caller can resolve.

        Raises:
            RuntimeError: on SQLite (its writes must go through `write()`'s lock).
        """
        if self._write_lock is not None:
            raise RuntimeError("autocommit() is for PostgreSQL; SQLite writes go through write()")
        async with self._write_engine.connect() as conn:
            try:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn
            finally:
                if not conn.invalidated and not conn.closed:
                    raw = await conn.get_raw_connection()
                    if pg_pool.driver_closed(raw.dbapi_connection):
                        await conn.invalidate()

    @asynccontextmanager
    async def driver(self) -> AsyncIterator[Any]:
        """Yield a pooled PostgreSQL connection as the driver's own (an asyncpg Connection).

        `autocommit()` for callers that send their statements on the driver and handle its
        exceptions themselves: the pool's checkout and checkin only, without SQLAlchemy's
        connection wrapper and its isolation-level switch on the way in and out (about 70 µs
        of CPU per statement against 145, decision 0059). Outside any transaction, as asyncpg
        runs a statement it is given: each commits alone. The same pool and the same
        checkout guard (mesh/storage/pg_pool.py); a connection the driver found closed on the way,
        or one whose statement failed for any reason but the server's answer (a cut, the
        driver's own state error, a cancellation), is dropped, not returned (decision 0044).

        Raises:
            RuntimeError: on SQLite.
        """
        if self._write_lock is not None:
            raise RuntimeError("driver() is for PostgreSQL; SQLite writes go through write()")
        pooled = await self._write_engine.raw_connection()
        broken = False
        try:
            yield pooled.driver_connection
        except BaseException as exc:
            # Anything but the server's answer to a statement (a constraint, a bad value)
            # may leave the driver mid-protocol: a lost or cut connection, the driver's own
            # state error after one ("another operation is in progress"), a cancellation.
            broken = not pg_pool.server_answered(exc)
            raise
        finally:
            if broken or pg_pool.driver_closed(pooled.dbapi_connection):
                await greenlet_spawn(pooled.invalidate)
            else:
                await greenlet_spawn(pooled.close)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """Yield a connection in a read transaction."""
        async with self._read_engine.begin() as conn:
            yield conn

    async def write_sync(self, fn: Callable[[Connection], T], *, offload: bool = False) -> T:
        """Run fn(connection) as one writing transaction; commit on return, roll back on error.

        fn must not touch the event loop, and may run again after a rollback: on a SQLite
        file it runs inline on the loop's thread, and again on the write thread when the
        inline attempt found the lock taken (see the module docstring); with `offload`, or
        on `:memory:`, only on the write thread. Serialized with `write()`.

        On PostgreSQL a run of fn that failed because its connection was lost (the server
        closed it: mesh/storage/transient.py `connection_lost`) before COMMIT was sent runs once more on
        a fresh connection: nothing of it committed (decision 0044). A failure at COMMIT,
        or a second loss, is raised.

        Returns:
            What fn returned.
        """
        if self._sync_write is None or self._write_pool is None:
            return await pg_pool.once_more(self.write, lambda conn: conn.run_sync(fn))
        assert self._write_lock is not None
        if self._inline_write is not None and not offload and not self._write_lock.locked():
            ran, value = self._inline(self._inline_write, "write", fn)
            if ran:
                return cast(T, value)
        engine = self._sync_write

        def transaction() -> T:
            conn = self._thread_conn(engine, "write")
            with conn.begin():
                return fn(conn)

        async with self._write_lock:
            return await asyncio.get_running_loop().run_in_executor(self._write_pool, transaction)

    async def read_sync(self, fn: Callable[[Connection], T], *, offload: bool = False) -> T:
        """Run fn(connection) in one read transaction and return its result (see write_sync).

        On a SQLite file it runs inline unless `offload` (see the module docstring). On
        PostgreSQL a transient failure (a terminated or reset connection, mesh/storage/transient.py)
        runs the read again, with bounded backoff: a read changes nothing, so it is safe to repeat.
        """
        if self._sync_read is None or self._read_pool is None:

            async def once() -> T:
                async with self.read() as conn:
                    return await conn.run_sync(fn)

            return await retry_transient(once, what="read")
        if self._inline_read is not None and not offload:
            ran, value = self._inline(self._inline_read, "read", fn)
            if ran:
                return cast(T, value)
        engine = self._sync_read

        def transaction() -> T:
            conn = self._thread_conn(engine, "read")
            with conn.begin():
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self._read_pool, transaction)

    def _inline(self, engine: Engine, role: str, fn: Callable[[Connection], T]) -> tuple[bool, T | None]:
        """Run fn as one transaction on this thread's inline connection (see the module docstring).

        Returns:
            (True, what fn returned); or (False, None) when another connection held the lock:
            the transaction was rolled back (or never began) and nothing was done.
        """
        conn: Connection | None = getattr(self._inline_local, role, None)
        try:
            if conn is None or conn.closed or conn.invalidated:
                # Connecting sets the journal mode, which may also find the lock taken.
                conn = engine.connect()
                setattr(self._inline_local, role, conn)
            with conn.begin():
                value = fn(conn)
        except OperationalError as exc:
            if not lock_taken(exc):
                raise
            self.inline_fallbacks += 1
            return False, None
        self.inline_transactions += 1
        return True, value

    def _thread_conn(self, engine: Engine, role: str) -> Connection:
        """Return this transaction thread's own connection to engine (opened on first use)."""
        conn: Connection | None = getattr(self._thread_local, role, None)
        if conn is None or conn.closed or conn.invalidated:
            conn = engine.connect()
            setattr(self._thread_local, role, conn)
        return conn

    async def write_tx(
        self, body: Callable[[AsyncConnection], Coroutine[Any, Any, T]], *, offload: bool = False
    ) -> T:
        """Run `await body(conn)` as one writing transaction (see the module docstring).

        On PostgreSQL a body whose connection was lost before COMMIT runs once more (see
        write_sync); on SQLite a body may run again too, so it must be safe to repeat.

        Raises:
            Whatever body raises (the transaction is rolled back).
        """
        if self._sync_write is None:
            return await pg_pool.once_more(self.write, body)
        return await self.write_sync(lambda conn: _drive(body(_SyncBacked(conn))), offload=offload)  # type: ignore[arg-type]

    async def read_tx(
        self, body: Callable[[AsyncConnection], Coroutine[Any, Any, T]], *, offload: bool = False
    ) -> T:
        """Run `await body(conn)` in one read transaction (see write_tx and read_sync)."""
        if self._sync_read is None:
            return await retry_transient(lambda: pg_pool.once_more(self.read, body), what="read")
        return await self.read_sync(lambda conn: _drive(body(_SyncBacked(conn))), offload=offload)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Dispose of the engines and stop the transaction threads."""
        await self._write_engine.dispose()
        if self._read_engine is not self._write_engine:
            await self._read_engine.dispose()
        for pool in (self._write_pool, self._read_pool):
            if pool is not None:
                pool.shutdown(wait=False)
        for role in ("write", "read"):
            conn = getattr(self._inline_local, role, None)
            if conn is not None:
                conn.close()
                setattr(self._inline_local, role, None)
        for engine in (self._sync_write, self._sync_read, self._inline_write, self._inline_read):
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
