"""The run store's SQL: prebuilt statements and the row helpers of its transactions.

Split from runs/storage/store.py (which owns the transactions and their invariants; see its
docstring). The statements are built once with bound parameters, so a call only binds values
(decision 0017). Since decision 0026 the turn's hot path runs elsewhere (runs/storage/lite.py on
SQLite, runs/storage/pg.py on PostgreSQL); `save` here is PostgreSQL's path for the saves the
server-side function does not take, the rest serves the paths off a turn (takeover heads,
session replays, NOTIFY). No transaction is opened here: every function runs on a
connection its caller holds.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, insert, select, text, update

from agentrt.runs.domain import StoredEvent
from agentrt.runs.storage.models import RunEventRow, RunLogRow, RunRow
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


class GuardFailed(Exception):
    """Raised inside a save point's transaction to roll it back when a guard no longer holds."""


#: The PostgreSQL notification channel carrying "events were written" (runs/events/notify.py).
EVENTS_CHANNEL = "agentrt_run_events"
#: The PostgreSQL notification channel carrying "input was queued on this run" (its run id;
#: runs/storage/input_watch.py, decision 0060).
INPUT_CHANNEL = "agentrt_run_input"

#: What a save point's fenced update returns: the lease it holds, the input queue.
HELD = (RunRow.fencing_token, RunRow.lease_owner, RunRow.pending_input_json)
#: The run log's highest seq, built once (bound parameter p_run).
LAST_LOG_SEQ = select(func.max(RunLogRow.seq)).where(RunLogRow.run_id == bindparam("p_run"))


#: The save point's inserts (executemany), built once.
INSERT_LOG, INSERT_EVENTS = insert(RunLogRow), insert(RunEventRow)


@functools.lru_cache(maxsize=256)
def fenced_update(columns: tuple[str, ...], fenced: bool, by_status: bool) -> Any:
    """The save point's guarded UPDATE … RETURNING for one set of columns, built once.

    Bound parameters: p_run, v_<column> for each column, p_token when fenced, p_status
    (expanding) when by_status. A save point writes one of a few column sets, so the cache
    holds them all and a save point only binds values (decision 0017).
    """
    cond = [RunRow.run_id == bindparam("p_run")]
    if fenced:
        cond.append(RunRow.fencing_token == bindparam("p_token"))
    if by_status:
        cond.append(RunRow.status.in_(bindparam("p_status", expanding=True)))
    return (
        update(RunRow).where(and_(*cond)).values({c: bindparam(f"v_{c}") for c in columns}).returning(*HELD)
    )


def busy_query(tenant: str, session_id: str) -> Any:
    """The query of the session's unfinished run (RUNNING or SUSPENDED), at most one row."""
    return (
        select(RunRow.run_id)
        .where(
            RunRow.tenant == tenant,
            RunRow.session_id == session_id,
            RunRow.status.in_([cpb.RUN_STATUS_RUNNING, cpb.RUN_STATUS_SUSPENDED]),
        )
        .limit(1)
    )


def log_rows(
    run_id: str, last: int, entries: list[tuple[str, dict[str, Any]]], token: int, owner: str
) -> list[dict[str, Any]]:
    """The run_log rows of entries appended after seq `last`, under the lease (token, owner)."""
    now = time.time()
    return [
        {
            "run_id": run_id,
            "seq": last + i,
            "kind": kind,
            "payload": json.dumps(payload),
            "time_s": now,
            "fencing_token": token,
            "lease_owner": owner,
        }
        for i, (kind, payload) in enumerate(entries, start=1)
    ]


def session_head(conn: Connection, tenant: str, session_id: str) -> int:
    """The highest session seq issued: stored events and every run's reservation."""
    stored = conn.scalar(
        select(func.max(RunEventRow.session_seq)).where(
            RunEventRow.tenant == tenant, RunEventRow.session_id == session_id
        )
    )
    reserved = conn.scalar(
        select(func.max(RunRow.session_seq_reserved)).where(
            RunRow.tenant == tenant, RunRow.session_id == session_id
        )
    )
    return max(stored or 0, reserved or 0)


def heads(conn: Connection, run_id: str, tenant: str, session_id: str) -> tuple[int, int]:
    """The highest (run seq, session seq) issued, stored or reserved."""
    stored = conn.scalar(select(func.max(RunEventRow.seq)).where(RunEventRow.run_id == run_id))
    reserved = conn.scalar(select(RunRow.event_seq_reserved).where(RunRow.run_id == run_id))
    return max(stored or 0, reserved or 0), session_head(conn, tenant, session_id)


def number_events(
    conn: Connection, run_id: str, tenant: str, session_id: str, events: Sequence[pb.RunEvent]
) -> list[StoredEvent]:
    """Number events after the highest seqs the run and its session issued (stored or reserved)."""
    seq, sseq = heads(conn, run_id, tenant, session_id)
    return numbered(run_id, tenant, session_id, events, seq, sseq)


def numbered(
    run_id: str, tenant: str, session_id: str, events: Sequence[pb.RunEvent], seq: int, sseq: int
) -> list[StoredEvent]:
    """Events numbered after run seq `seq` and session seq `sseq` (each event's seq is set)."""
    stored = []
    for i, event in enumerate(events, start=1):
        event.seq = seq + i
        stored.append(StoredEvent(run_id, seq + i, tenant, session_id, sseq + i, event))
    return stored


def notify(conn: Connection, replica: str, events: Sequence[StoredEvent]) -> None:
    """On PostgreSQL, tell every listening replica which topics got events (sent at commit).

    One notification per transaction and run: {"replica", "run_id", "tenant", "session_id",
    "seq"} (the highest run seq written), well under PostgreSQL's 8000-byte payload bound.
    """
    if not events or conn.dialect.name != "postgresql":
        return
    last = max(events, key=lambda e: e.seq)
    payload = json.dumps(
        {
            "replica": replica,
            "run_id": last.run_id,
            "tenant": last.tenant,
            "session_id": last.session_id,
            "seq": last.seq,
        }
    )
    conn.execute(text("SELECT pg_notify(:ch, :payload)"), {"ch": EVENTS_CHANNEL, "payload": payload})


def event_values(ev: StoredEvent) -> dict[str, Any]:
    """The run_events row of an event."""
    return {
        "run_id": ev.run_id,
        "seq": ev.seq,
        "tenant": ev.tenant,
        "session_id": ev.session_id,
        "session_seq": ev.session_seq,
        "event": ev.event.SerializeToString(),
    }


def stored_event(row: Any) -> StoredEvent:
    """The StoredEvent of a run_events row."""
    m = row._mapping
    return StoredEvent(
        m["run_id"],
        m["seq"],
        m["tenant"],
        m["session_id"],
        m["session_seq"],
        pb.RunEvent.FromString(m["event"]),
    )


def save(
    conn: Connection,
    replica: str,
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
    """The save point's body through SQLAlchemy (runs/storage/store.py `RunStore.save` has the meaning).

    What PostgreSQL runs when `runs_save` cannot carry a save (runs/storage/pg.py); SQLite runs
    the same steps at the driver level (runs/storage/lite.py).

    Returns:
        The events numbered here.

    Raises:
        GuardFailed: the token or the status guard no longer holds (nothing was written).
    """
    fenced = fenced_update(tuple(sorted(values)), token is not None, statuses is not None)
    params: dict[str, Any] = {f"v_{k}": v for k, v in values.items()}
    params.update(p_run=run_id, p_token=token, p_status=list(statuses or ()))
    # The fenced update returns what the rest of the save point needs (the lease the
    # entries are written under, the input queue), so no statement re-reads the row; the
    # update holds the row until the commit.
    held = conn.execute(fenced, params).first()
    if held is None:
        raise GuardFailed()
    queue = held[2]
    if drop_inputs:
        dropped = set(drop_inputs)
        kept = [i for i in json.loads(queue or "[]") if i.get("id") not in dropped]
        queue = json.dumps(kept)
        conn.execute(update(RunRow).where(RunRow.run_id == run_id).values(pending_input_json=queue))
    if settle is not None:
        settle(queue)
    if log:
        last = conn.scalar(LAST_LOG_SEQ, {"p_run": run_id}) or 0
        conn.execute(INSERT_LOG, log_rows(run_id, last, log, held[0], held[1]))
    if events:
        # One executemany statement: a save point carries a turn's events.
        conn.execute(INSERT_EVENTS, [event_values(ev) for ev in events])
    stored: list[StoredEvent] = []
    if new_events:
        assert session is not None
        stored = number_events(conn, run_id, session[0], session[1], new_events)
        conn.execute(INSERT_EVENTS, [event_values(ev) for ev in stored])
    notify(conn, replica, [*events, *stored])
    return stored
