"""The run store's hot operations on PostgreSQL: one statement each, on the driver (decision 0026).

What it owns: the save point and the insert of a run as calls of the server-side functions
`runs_save` / `runs_insert` (runs migration 0004, whose docstring has their steps), and the
reads a turn or a stream's replay makes (the run row, its input queue, its events, its
log), each sent as one statement outside a transaction on a pooled asyncpg connection
(`Database.driver`): no BEGIN/COMMIT round trips, no pass through SQLAlchemy's
execution machinery. A single statement is its own transaction, so a save point is still
all-or-nothing, its NOTIFY still delivered at its commit (decision 0011).

The shapes it cannot take stay with runs/storage/store.py's SQLAlchemy transaction: a save that
numbers events itself (`new_events`), consumes injected input (`drop_inputs`), carries
events of another run, or a value JSON cannot carry (a float that is not finite).

Reads are retried through transient failures as `Database.read_sync` retries them
(mesh/storage/transient.py); writes are not retried here (runs/storage/save_retry.py decides for a save).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from agentrt.mesh.storage.db import Database
from agentrt.mesh.storage.transient import retry_transient
from agentrt.runs.domain import StoredEvent
from agentrt.runs.storage.lite import RUN_COLUMNS
from agentrt.v1 import run_service_pb2 as pb

T = TypeVar("T")

_SAVE = "SELECT runs_save($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
_INSERT = "SELECT runs_insert($1, $2, $3, $4, $5)"
_SELECT_RUN = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE run_id = $1"
_PENDING_INPUT = "SELECT pending_input_json FROM runs WHERE run_id = $1"
_PENDING_INPUT_LOCKED = _PENDING_INPUT + " FOR UPDATE"
_EVENTS = (
    "SELECT run_id, seq, tenant, session_id, session_seq, event FROM run_events "
    "WHERE run_id = $1 AND seq > $2 AND ($3::integer IS NULL OR seq <= $3) ORDER BY seq"
)
_LOG = "SELECT seq, kind, payload FROM run_log WHERE run_id = $1 ORDER BY seq"


async def _one(db: Database, call: Callable[[Any], Awaitable[T]]) -> T:
    """Run call(asyncpg connection) outside a transaction on a pooled connection."""
    async with db.driver() as conn:
        return await call(conn)


async def _read(db: Database, call: Callable[[Any], Awaitable[T]]) -> T:
    """A one-statement read, run again through transient failures (it changes nothing)."""
    return await retry_transient(lambda: _one(db, call), what="read")


def _json_value(value: Any) -> Any:
    """A stored value as the functions' JSON carries it (bytea as hex text after a backslash-x)."""
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return value


def carries(values: dict[str, Any], run_id: str, events: Sequence[StoredEvent]) -> bool:
    """Whether `runs_save` can take this save (see the module docstring)."""
    for v in values.values():
        if isinstance(v, float) and not math.isfinite(v):
            return False
    if events:
        first = events[0]
        tenant, session_id = first.tenant, first.session_id
        return all(e.run_id == run_id and e.tenant == tenant and e.session_id == session_id for e in events)
    return True


async def save(
    db: Database,
    run_id: str,
    values: dict[str, Any],
    token: int | None,
    statuses: Sequence[int] | None,
    log: list[tuple[str, dict[str, Any]]],
    events: Sequence[StoredEvent],
    replica: str,
    now: float,
    sending: Callable[[], None],
    settle: Callable[[str | None], None] | None = None,
) -> bool:
    """One `runs_save` call: the save point (runs/storage/store.py `RunStore.save`), all or nothing.

    `sending` is called right before the statement goes out: from then on a failure leaves
    the outcome unknown (runs/storage/save_retry.py asks the row). With `settle` (a run's
    end), the call runs in a transaction after reading the input queue under the row's lock
    (`settle` sees it before the events are encoded): four round trips instead of one.

    Returns:
        False when the token or the status guard no longer holds (nothing written).
    """
    changes = json.dumps({k: _json_value(v) for k, v in values.items()})
    kinds = [kind for kind, _ in log]
    payloads = [json.dumps(payload) for _, payload in log]
    tenant = events[0].tenant if events else ""
    session_id = events[0].session_id if events else ""

    def args() -> tuple[Any, ...]:
        return (
            run_id, token, None if statuses is None else list(statuses), changes, kinds, payloads, now,
            [e.seq for e in events], [e.session_seq for e in events],
            [e.event.SerializeToString() for e in events], tenant, session_id, replica,
        )  # fmt: skip

    async def call(conn: Any) -> bool:
        if settle is None:
            sending()
            return bool(await conn.fetchval(_SAVE, *args()))
        async with conn.transaction():
            settle(await conn.fetchval(_PENDING_INPUT_LOCKED, run_id))
            sending()
            return bool(await conn.fetchval(_SAVE, *args()))

    return await _one(db, call)


async def insert_run(
    db: Database,
    values: dict[str, Any],
    started: dict[str, Any],
    now: float,
    events: Sequence[pb.RunEvent],
    replica: str,
) -> list[StoredEvent]:
    """One `runs_insert` call: the run row (column -> stored value), "started", the first events.

    Returns:
        The events stored: run seqs 1..n, session seqs after the session's head.

    Raises:
        asyncpg.IntegrityConstraintViolationError: the idempotency key is taken, or the
            session has an unfinished run.
    """
    row = json.dumps({k: _json_value(v) for k, v in values.items()})
    for i, event in enumerate(events, start=1):
        event.seq = i
    blobs = [event.SerializeToString() for event in events]
    head = await _one(db, lambda conn: conn.fetchval(_INSERT, row, json.dumps(started), now, blobs, replica))
    run_id, tenant, session_id = values["run_id"], values["tenant"], values["session_id"]
    return [StoredEvent(run_id, i, tenant, session_id, head + i, ev) for i, ev in enumerate(events, start=1)]


async def get_run(db: Database, run_id: str, tenant: str | None) -> Any:
    """The run's row (an asyncpg Record, indexed by column name), or None; the tenant's only when given."""
    row = await _read(db, lambda conn: conn.fetchrow(_SELECT_RUN, run_id))
    if row is None or (tenant is not None and row["tenant"] != tenant):
        return None
    return row


async def pending_input(db: Database, run_id: str) -> str | None:
    """The run's input queue as stored (JSON text), or None for an unknown run."""
    return await _read(db, lambda conn: conn.fetchval(_PENDING_INPUT, run_id))


async def read_events(db: Database, run_id: str, after: int, upto: int | None) -> list[StoredEvent]:
    """The run's events with after < seq <= upto (upto None: no bound), in seq order."""
    rows = await _read(db, lambda conn: conn.fetch(_EVENTS, run_id, after, upto))
    return [StoredEvent(r[0], r[1], r[2], r[3], r[4], pb.RunEvent.FromString(r[5])) for r in rows]


async def read_log(db: Database, run_id: str) -> list[tuple[int, str, str]]:
    """The run log's (seq, kind, payload JSON text), in seq order."""
    rows = await _read(db, lambda conn: conn.fetch(_LOG, run_id))
    return [(r[0], r[1], r[2]) for r in rows]
