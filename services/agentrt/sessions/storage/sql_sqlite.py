"""A turn's session statement on SQLite, run with the stdlib driver (decision 0025).

The append (AppendEntries) is the session store's hot path: one per tool turn (the tail an
include_tail append returns needs no read, decision 0057). It runs as a transaction body
of `Database.write_sync` (on a SQLite file inline on the event loop's thread, decision
0023) and executes plain SQL on the transaction's own sqlite3 connection: SQLAlchemy's
execution machinery (statement cache lookups, the execution context, result wrapping) cost
several times the statements themselves.
The tables are still SQLAlchemy's (`models`) and Alembic's; only the execution is the driver's.

The append's steps and their order are the PostgreSQL function's (sessions migration
0002): claim the session row (it exists at the generation named; the change record moves
to now, never backwards), read the last entry, check the fence, the leaf-move targets and
the usage keys, mint seqs from `session_marks`, insert. A refusal raises inside the
transaction, so the claim is rolled back with it and nothing changes. The write
transaction is BEGIN IMMEDIATE (mesh/storage/db.py), so no other writer runs between the steps.

A driver error is raised as SQLAlchemy's wrapper of it (`sqlalchemy.exc.OperationalError`
and kin), the form `Database` (a taken lock sends the inline attempt to its thread) and the
store (UNAVAILABLE) expect.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from agentrt.sessions.domain import LEAF, Entry, Ref
from agentrt.sessions.storage import appends as A
from agentrt.sessions.storage.rows import entry_values

_CLAIM = (
    "UPDATE sessions SET update_time_us = max(update_time_us, :now) "
    "WHERE tenant = :tenant AND session_id = :sid RETURNING generation"
)
_INCARNATION = "tenant = :tenant AND session_id = :sid AND generation = :gen"
_LAST = (
    f"SELECT seq, entry_id, kind, leaf_entry_id FROM session_entries WHERE {_INCARNATION} "
    "ORDER BY seq DESC LIMIT 1"
)
_KIND_OF = f"SELECT kind FROM session_entries WHERE {_INCARNATION} AND entry_id = :id"
_WITH_USAGE = (
    f"SELECT DISTINCT run_id, turn, response_id FROM session_entries WHERE {_INCARNATION} "
    "AND response_id = :response AND usage_json IS NOT NULL"
)
_MINT = (
    "UPDATE session_marks SET last_seq = last_seq + :n WHERE tenant = :tenant AND session_id = :sid "
    "RETURNING last_seq"
)
_INSERT = "INSERT INTO session_entries ({}) VALUES ({})".format(
    ", ".join(entry_values("", "", 0, Entry(kind=LEAF))),
    ", ".join(f":{c}" for c in entry_values("", "", 0, Entry(kind=LEAF))),
)


@contextmanager
def _driver_errors(sql: str) -> Iterator[None]:
    """Raise a driver error as SQLAlchemy's wrapper of it (see the module docstring)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc


def _driver(conn: Connection) -> sqlite3.Connection:
    raw = conn.connection.driver_connection
    assert isinstance(raw, sqlite3.Connection)
    return raw


def append(
    tenant: str, ref: Ref, expected: int | None, prepared: A.Prepared
) -> Callable[[Connection], tuple[list[Entry], int]]:
    """The append as a `write_sync` transaction body (see the module docstring).

    The body may run twice (an inline attempt that found the lock taken runs again on the
    write thread); it changes nothing outside its transaction.

    Returns:
        A body returning (the stored entries in order, the generation that took the write).

    Raises (from the body):
        MeshError: what `appends.refusal` returns; ABORTED/SEQ_MISMATCH when the insert met
            the unique positions (unreachable under the write lock: the backstop).
        sqlalchemy.exc.DBAPIError: the driver failed (a taken lock, a broken file).
    """

    def body(conn: Connection) -> tuple[list[Entry], int]:
        db = _driver(conn)
        sid = ref.session_id
        with _driver_errors(_CLAIM):
            claimed = db.execute(_CLAIM, {"now": prepared.now_us, "tenant": tenant, "sid": sid}).fetchone()
            if claimed is None:
                raise A.refusal(A.NO_SESSION, ref, expected, 0, 0, "", 0, "")
            gen = claimed[0]
            if ref.generation and ref.generation != gen:
                raise A.refusal(A.STALE, ref, expected, gen, 0, "", 0, "")
            where = {"tenant": tenant, "sid": sid, "gen": gen}
            last = db.execute(_LAST, where).fetchone()
            last_seq, leaf = 0, ""
            if last is not None:
                last_seq, leaf = last[0], (last[3] if last[2] == LEAF else last[1])
            if expected is not None and expected != last_seq:
                raise A.refusal(A.SEQ_MISMATCH, ref, expected, gen, last_seq, "", 0, "")
            for target in prepared.leaf_targets:
                kind = db.execute(_KIND_OF, {**where, "id": target}).fetchone()
                if kind is None:
                    raise A.refusal(A.ENTRY_NOT_FOUND, ref, expected, gen, 0, target, 0, "")
                if kind[0] == LEAF:
                    raise A.refusal(A.LEAF_TARGET, ref, expected, gen, 0, target, 0, "")
            if prepared.usage_keys:
                _check_usage(db, where, prepared, ref, expected, gen)
            n = len(prepared.batch)
            base = db.execute(_MINT, {"n": n, "tenant": tenant, "sid": sid}).fetchone()[0] - n
            stored = prepared.stored(base, leaf)
            try:
                db.executemany(_INSERT, [entry_values(tenant, sid, gen, e) for e in stored])
            except sqlite3.IntegrityError:
                raise A.lost_race() from None
        return stored, gen

    return body


def _check_usage(
    db: sqlite3.Connection,
    where: dict[str, Any],
    prepared: A.Prepared,
    ref: Ref,
    expected: int | None,
    gen: int,
) -> None:
    """Refuse a batch whose usage of a response is already recorded (004 §2.7f)."""
    taken: set[tuple[str, int, str]] = set()
    for response in sorted({key[2] for key in prepared.usage_keys}):
        taken.update(
            (r[0], int(r[1]), r[2]) for r in db.execute(_WITH_USAGE, {**where, "response": response})
        )
    hits = sorted(taken & set(prepared.usage_keys))
    if hits:
        run_id, turn, response_id = hits[0]
        raise A.refusal(A.USAGE_RECORDED, ref, expected, gen, 0, run_id, turn, response_id)
