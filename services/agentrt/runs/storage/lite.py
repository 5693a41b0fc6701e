"""The run store's hot transactions on SQLite, at the driver level (decision 0026).

What it owns: the bodies of the transactions a turn repeats (the save point, the insert of
a new run) and the reads a turn or a stream's replay makes (the run row, its input queue,
its events, its log), written against the stdlib sqlite3 connection under the SQLAlchemy
`Connection` that `Database.write_sync`/`read_sync` hand out. The transaction is still
theirs (BEGIN IMMEDIATE ... COMMIT, inline on the loop's thread or on the write thread,
mesh/storage/db.py); only the statements skip SQLAlchemy's execution machinery (compile cache
lookup, parameter processing, event dispatch, result setup), which cost more than the
statements themselves.

Invariants (the same as runs/storage/store.py's SQLAlchemy statements, which these replace on SQLite):
- the save point's fenced UPDATE ... RETURNING also returns the run log's highest seq (a
  scalar subquery): writers of a file are serialized by SQLite's write lock, so it is the
  seq the log's inserts continue from, read in the statement that takes the row;
- every SQLite error leaves as SQLAlchemy's wrapper of it (`DBAPIError.instance`), so a
  taken lock still sends an inline transaction to its thread (mesh/storage/db.py `lock_taken`) and
  a constraint is still an `IntegrityError`;
- values are stored as SQLAlchemy stored them (bytes as BLOB, booleans as 0/1, floats as REAL).

Every function runs inside a transaction its caller holds; none commits.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from agentrt.runs.domain import StoredEvent
from agentrt.runs.storage.models import RunRow
from agentrt.runs.storage.sql import GuardFailed, numbered
from agentrt.v1 import run_service_pb2 as pb

#: The runs table's columns, in table order (what `get_run` selects and `insert_run` writes).
RUN_COLUMNS: tuple[str, ...] = tuple(c.name for c in RunRow.__table__.columns)
_KNOWN = frozenset(RUN_COLUMNS)
_INSERT_RUN = f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})"
_SELECT_RUN = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE run_id = ?"
_INSERT_LOG = (
    "INSERT INTO run_log (run_id, seq, kind, payload, time_s, fencing_token, lease_owner) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_EVENTS = (
    "INSERT INTO run_events (run_id, seq, tenant, session_id, session_seq, event) VALUES (?, ?, ?, ?, ?, ?)"
)
_DROP_INPUTS = "UPDATE runs SET pending_input_json = ? WHERE run_id = ?"
_PENDING_INPUT = "SELECT pending_input_json FROM runs WHERE run_id = ?"
#: The highest run seq and session seq issued (stored or reserved), one statement.
_HEADS = (
    "SELECT max(coalesce((SELECT max(seq) FROM run_events WHERE run_id = ?1), 0),"
    " coalesce((SELECT event_seq_reserved FROM runs WHERE run_id = ?1), 0)),"
    " max(coalesce((SELECT max(session_seq) FROM run_events WHERE tenant = ?2 AND session_id = ?3), 0),"
    " coalesce((SELECT max(session_seq_reserved) FROM runs WHERE tenant = ?2 AND session_id = ?3), 0))"
)
_EVENTS = (
    "SELECT run_id, seq, tenant, session_id, session_seq, event FROM run_events WHERE run_id = ? AND seq > ?"
)
_LOG = "SELECT seq, kind, payload FROM run_log WHERE run_id = ? ORDER BY seq LIMIT ?"


def _cursor(conn: Connection) -> sqlite3.Cursor:
    """A cursor of the stdlib connection under conn (in conn's transaction)."""
    return cast(sqlite3.Connection, conn.connection.dbapi_connection).cursor()


def _run(cur: sqlite3.Cursor, sql: str, params: Sequence[Any]) -> list[Any]:
    """Execute one statement and fetch all its rows (which also ends the statement)."""
    try:
        return cur.execute(sql, params).fetchall()
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


def _many(cur: sqlite3.Cursor, sql: str, rows: list[tuple[Any, ...]]) -> None:
    try:
        cur.executemany(sql, rows)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, rows, exc, sqlite3.Error, ismulti=True) from exc


@functools.lru_cache(maxsize=256)
def fenced_update(columns: tuple[str, ...], fenced: bool, statuses: int | None) -> str:
    """The save point's guarded UPDATE ... RETURNING for one set of columns, built once.

    Parameters, in order: the columns' values, the run id, the token when fenced, then
    `statuses` statuses when not None. Returns one row (fencing token, lease owner, input
    queue, the run log's highest seq or NULL) when the guards held, none otherwise.

    Raises:
        ValueError: a column the runs table does not have.
    """
    unknown = set(columns) - _KNOWN
    if unknown:
        raise ValueError(f"no such runs column: {sorted(unknown)}")
    where = "run_id = ?" + (" AND fencing_token = ?" if fenced else "")
    if statuses is not None:
        where += f" AND status IN ({', '.join('?' * statuses)})"
    return (
        f"UPDATE runs SET {', '.join(f'{c} = ?' for c in columns)} WHERE {where} RETURNING fencing_token,"
        " lease_owner, pending_input_json, (SELECT max(seq) FROM run_log WHERE run_log.run_id = runs.run_id)"
    )


def event_row(ev: StoredEvent) -> tuple[Any, ...]:
    """The run_events row of an event, in _INSERT_EVENTS's order."""
    return (ev.run_id, ev.seq, ev.tenant, ev.session_id, ev.session_seq, ev.event.SerializeToString())


def _number(
    cur: sqlite3.Cursor, run_id: str, tenant: str, session_id: str, events: Sequence[pb.RunEvent]
) -> list[StoredEvent]:
    """Number events after the run's and its session's heads and insert them."""
    seq, sseq = _run(cur, _HEADS, (run_id, tenant, session_id))[0]
    stored = numbered(run_id, tenant, session_id, events, seq, sseq)
    _many(cur, _INSERT_EVENTS, [event_row(ev) for ev in stored])
    return stored


def save(
    conn: Connection,
    run_id: str,
    values: dict[str, Any],
    token: int | None,
    statuses: Sequence[int] | None,
    log: list[tuple[str, dict[str, Any]]],
    events: Sequence[StoredEvent],
    new_events: Sequence[pb.RunEvent],
    session: tuple[str, str] | None,
    drop_inputs: Sequence[str],
    settle: Callable[[str | None], None] | None = None,
) -> list[StoredEvent]:
    """The save point's body (runs/storage/store.py `RunStore.save` has the arguments' meaning).

    Returns:
        The events numbered here.

    Raises:
        GuardFailed: the token or the status guard no longer holds (nothing was written).
    """
    cur = _cursor(conn)
    params = [*values.values(), run_id]
    if token is not None:
        params.append(token)
    if statuses is not None:
        params.extend(statuses)
    sql = fenced_update(tuple(values), token is not None, None if statuses is None else len(statuses))
    rows = _run(cur, sql, params)
    if not rows:
        raise GuardFailed()
    held_token, owner, queue, last = rows[0]
    if drop_inputs:
        dropped = set(drop_inputs)
        kept = [i for i in json.loads(queue or "[]") if i.get("id") not in dropped]
        queue = json.dumps(kept)
        _run(cur, _DROP_INPUTS, (queue, run_id))
    if settle is not None:
        settle(queue)
    if log:
        now, last = time.time(), last or 0
        rows = [
            (run_id, last + i, kind, json.dumps(payload), now, held_token, owner)
            for i, (kind, payload) in enumerate(log, start=1)
        ]
        _many(cur, _INSERT_LOG, rows)
    if events:
        _many(cur, _INSERT_EVENTS, [event_row(ev) for ev in events])
    if not new_events:
        return []
    assert session is not None
    return _number(cur, run_id, session[0], session[1], new_events)


def insert_run(
    conn: Connection, values: dict[str, Any], started: dict[str, Any], events: Sequence[pb.RunEvent]
) -> list[StoredEvent]:
    """Insert a run row (`values`: column -> stored value), its "started" entry and first events.

    Returns:
        The events, numbered after the run's and its session's heads.

    Raises:
        sqlalchemy.exc.IntegrityError: the idempotency key is taken, or the session has an
            unfinished run (the partial unique index).
    """
    cur = _cursor(conn)
    run_id, tenant, session_id = values["run_id"], values["tenant"], values["session_id"]
    _run(cur, _INSERT_RUN, [values[c] for c in RUN_COLUMNS])
    lease = (values["fencing_token"], values["lease_owner"])
    _run(cur, _INSERT_LOG, (run_id, 1, "started", json.dumps(started), time.time(), *lease))
    return _number(cur, run_id, tenant, session_id, events) if events else []


def get_run(conn: Connection, run_id: str, tenant: str | None) -> dict[str, Any] | None:
    """The run's row as column -> value (only the tenant's when tenant is given), or None."""
    if tenant is None:
        rows = _run(_cursor(conn), _SELECT_RUN, (run_id,))
    else:
        rows = _run(_cursor(conn), _SELECT_RUN + " AND tenant = ?", (run_id, tenant))
    return dict(zip(RUN_COLUMNS, rows[0], strict=True)) if rows else None


def pending_input(conn: Connection, run_id: str) -> str | None:
    """The run's input queue as stored (JSON text), or None for an unknown run."""
    rows = _run(_cursor(conn), _PENDING_INPUT, (run_id,))
    return rows[0][0] if rows else None


def read_events(conn: Connection, run_id: str, after: int, upto: int | None, limit: int) -> list[StoredEvent]:
    """The run's events with after < seq <= upto, in seq order, at most `limit` (-1: all)."""
    cur = _cursor(conn)
    if upto is None:
        rows = _run(cur, _EVENTS + " ORDER BY seq LIMIT ?", (run_id, after, limit))
    else:
        rows = _run(cur, _EVENTS + " AND seq <= ? ORDER BY seq LIMIT ?", (run_id, after, upto, limit))
    return [StoredEvent(r[0], r[1], r[2], r[3], r[4], pb.RunEvent.FromString(r[5])) for r in rows]


def read_log(conn: Connection, run_id: str, limit: int) -> list[tuple[int, str, str]]:
    """The run log's (seq, kind, payload JSON text), in seq order, at most `limit` (-1: all)."""
    return [(r[0], r[1], r[2]) for r in _run(_cursor(conn), _LOG, (run_id, limit))]
