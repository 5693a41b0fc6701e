"""The journal's FINISHED insert of a read-only call, one statement as the driver's (decision 0025).

Every read_file and list_files call writes its record once, after it ran (decision 0017
addendum): the insert is also the lookup, since a record already under the key (a repeat,
a cancel's tombstone, another call under the key) makes it lose. It is the tool service's
one database write per such call, so it runs without SQLAlchemy's execution machinery:

- SQLite: plain SQL on the stdlib connection of a `Database.write_sync` transaction (inline
  on the loop's thread, decision 0023), the datetimes bound by the column type's own
  SQLite processor, so SQLAlchemy reads back exactly what it would have written.
- PostgreSQL: one statement outside a transaction on the pooled driver connection
  (`Database.driver()`, decision 0059): no BEGIN and no COMMIT round trips, no pass through
  SQLAlchemy's connection wrapper; the statement commits when it ends.

`INSERT ... ON CONFLICT DO NOTHING` on both: a lost insert is a row count of 0, not an
error. The row is the same as `ToolStore.start` + `finish` would leave: state "finished",
the owner, started/heartbeat/finished at now, `cancel_requested` false, the outcome's JSON.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError

from agentrt.mesh.storage.db import Database
from agentrt.tools.storage.models import Execution

_COLUMNS = (
    "tenant",
    "run_id",
    "call_id",
    "tool",
    "fingerprint",
    "state",
    "owner",
    "started_at",
    "heartbeat_at",
    "finished_at",
    "result_json",
    "cancel_requested",
)
_TABLE = cast(Table, Execution.__table__)
_SQLITE_INSERT = (
    f"INSERT INTO tool_executions ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
    "ON CONFLICT DO NOTHING"
)
_PG_INSERT = (
    f"INSERT INTO tool_executions ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(_COLUMNS) + 1))}) ON CONFLICT DO NOTHING"
)
_SQLITE = sqlite.dialect()
#: How SQLAlchemy writes the journal's datetimes on SQLite (text, UTC, no offset).
_SQLITE_TIME = cast(
    Callable[[datetime], str], _TABLE.c.started_at.type.dialect_impl(_SQLITE).bind_processor(_SQLITE)
)


async def insert_finished(db: Database, values: tuple[Any, ...]) -> bool:
    """Insert a FINISHED record unless the key already has one.

    Args:
        db: the tool service's database.
        values: tenant, run_id, call_id column, tool, fingerprint, state, owner, started_at,
            heartbeat_at, finished_at (timezone-aware UTC datetimes), result_json.

    Returns:
        True when inserted, False when a record already held the key.

    Raises:
        sqlalchemy.exc.DBAPIError: SQLite failed; asyncpg.PostgresError, asyncpg.InterfaceError
            or OSError: PostgreSQL failed. Nothing is known to be written (INTERNAL either way).
    """
    if db.is_sqlite:
        return await db.write_sync(_sqlite_body(values))
    async with db.driver() as conn:
        status = await conn.execute(_PG_INSERT, *values, False)
    return status == "INSERT 0 1"


def _sqlite_body(values: tuple[Any, ...]) -> Callable[[Connection], bool]:
    row = (*values[:7], *(_SQLITE_TIME(t) for t in values[7:10]), values[10], 0)

    def body(conn: Connection) -> bool:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        try:
            return raw.execute(_SQLITE_INSERT, row).rowcount == 1
        except sqlite3.Error as exc:  # as SQLAlchemy's wrapper, which Database expects
            raise DBAPIError.instance(_SQLITE_INSERT, None, exc, sqlite3.Error) from exc

    return body
