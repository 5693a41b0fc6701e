"""The SQLite journal's claim and record on the event loop's own thread (decision 0022).

Every keyed model call writes the journal twice: the claim before the provider is asked and
the record before the answer is handed over. On a SQLite file each is a short transaction of
one or two statements on a WAL database with `synchronous=NORMAL` (a commit appends to the
WAL and does not sync), tens of microseconds of work. Round 5 ran them as prebuilt
SQLAlchemy statements on the database's write thread (`Database.write_sync`); py-spy of the
gateway then still showed the thread hop (executor submit, the future's wake-up of the
loop) and SQLAlchemy's execution machinery around statements that cost less than either.

`InlineSqlite` runs the same statements with the stdlib driver on one kept connection, on
the calling (event loop) thread, in `BEGIN IMMEDIATE` transactions with `busy_timeout=0`:
- the transaction is atomic to the loop (nothing else of this process runs during it), and
  to other connections by SQLite's write lock, as before;
- when any other connection holds the write lock (the journal's own aiosqlite writes:
  take_over, renew, release, sweep; another process on the same file), BEGIN fails at once
  with SQLITE_BUSY and the call answers `None`: the caller runs the transaction the old
  way (`write_sync`, which waits for the lock on its thread). The loop never waits on a lock;
- a claim that inserted knows its row (the values it inserted, in its own transaction) and
  reads nothing back; only a claim that found a row selects it.

The WAL's automatic checkpoint (every 1,000 pages written) runs on the committing
connection, so now and then one commit here also checkpoints (a sync of the WAL and the
database file) on the loop.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from agentrt.gateway.journal.store import CLAIMED_COLUMNS, Row, State

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


def write_lock_taken(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock (SQLITE_BUSY/LOCKED).

    Python reports the extended result code (e.g. SQLITE_BUSY_RECOVERY, 261, while a WAL is
    recovered after a crash); its low byte is the primary code.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)


_CLAIM = (
    "INSERT INTO gateway_model_calls (tenant, call_key, fingerprint, state, holder, lease_until_s,"
    " takeovers, response, created_at_s) VALUES (?, ?, ?, ?, ?, ?, 0, NULL, ?)"
    " ON CONFLICT (tenant, call_key) DO NOTHING"
)
_CLAIMED = f"SELECT {', '.join(CLAIMED_COLUMNS)} FROM gateway_model_calls WHERE tenant = ? AND call_key = ?"
_FINISH = (
    "UPDATE gateway_model_calls SET state = ?, response = ? WHERE tenant = ? AND call_key = ? AND state = ?"
)
_FINISHED = "SELECT response FROM gateway_model_calls WHERE tenant = ? AND call_key = ? AND state = ?"


class InlineSqlite:
    """The journal's claim and finish on one kept SQLite connection (see the module docstring)."""

    def __init__(self, path: str) -> None:
        """Remember the database file (it is opened on first use, after the migration)."""
        self._path = path
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=0")
            self._conn = conn
        return self._conn

    def _begin(self) -> sqlite3.Connection | None:
        """BEGIN IMMEDIATE on the kept connection; None when another connection writes."""
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if write_lock_taken(exc):
                return None
            raise
        return conn

    def claim(
        self, tenant: str, key: str, fingerprint: str, holder: str, now_s: float, lease_until_s: float
    ) -> tuple[Row, bool] | None:
        """JournalStore.claim as one transaction; None when the write lock is taken (ask again).

        Raises:
            sqlite3.Error: the database refused the statements (rolled back).
        """
        conn = self._begin()
        if conn is None:
            return None
        try:
            params = (tenant, key, fingerprint, int(State.PENDING), holder, lease_until_s, now_s)
            if conn.execute(_CLAIM, params).rowcount == 1:
                conn.execute("COMMIT")
                return Row(fingerprint, State.PENDING, holder, lease_until_s, created_at_s=now_s), True
            got: Any = conn.execute(_CLAIMED, (tenant, key)).fetchone()
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        return Row.read(got), False

    def finish(self, tenant: str, key: str, response: bytes) -> tuple[bytes | None] | None:
        """JournalStore.finish as one transaction; None when the write lock is taken (ask again).

        Returns:
            (the answer on record, or None when no DONE row is left: it was swept,), or None:
            the lock is taken and nothing was done.

        Raises:
            sqlite3.Error: the database refused the statements (rolled back).
        """
        conn = self._begin()
        if conn is None:
            return None
        try:
            done, pending = int(State.DONE), int(State.PENDING)
            if conn.execute(_FINISH, (done, response, tenant, key, pending)).rowcount == 1:
                conn.execute("COMMIT")
                return (response,)
            got = conn.execute(_FINISHED, (tenant, key, done)).fetchone()
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        return (None if got is None else got[0],)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def close(self) -> None:
        """Close the kept connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
