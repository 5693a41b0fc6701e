"""The run_events rows: numbering, values, decoding and the NOTIFY that wakes other replicas.

Shared by the store's save point (runs/store.py) and its reads: `number_events` numbers events
after the highest seq stored AND the highest an owner reserved (so a seq a subscriber may have
seen is never given to another event, 004 §2.11); `notify_events` sends one NOTIFY on
`EVENTS_CHANNEL` per transaction that inserts events (PostgreSQL only; delivered at commit,
runs/notify.py, decision 0011).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.runs.models import RunEventRow, RunRow
from agentrt.runs.records import StoredEvent
from agentrt.v1 import run_service_pb2 as pb

#: The PostgreSQL notification channel carrying "events were written" (runs/notify.py).
EVENTS_CHANNEL = "agentrt_run_events"


async def insert_events(
    conn: AsyncConnection, run_id: str, tenant: str, session_id: str, events: Sequence[pb.RunEvent]
) -> list[StoredEvent]:
    """Number events (`number_events`) and insert them; return them stored, in order."""
    if not events:
        return []
    stored = await conn.run_sync(number_events, run_id, tenant, session_id, events)
    await conn.execute(insert(RunEventRow), [event_values(ev) for ev in stored])
    return stored


def session_head_of(conn: Connection, tenant: str, session_id: str) -> int:
    """Return the highest seq the session's timeline may have issued (stored or reserved)."""
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


def heads_of(conn: Connection, run_id: str, tenant: str, session_id: str) -> tuple[int, int]:
    """Return (run head, session head): the highest seqs issued, stored or reserved."""
    stored = conn.scalar(select(func.max(RunEventRow.seq)).where(RunEventRow.run_id == run_id))
    reserved = conn.scalar(select(RunRow.event_seq_reserved).where(RunRow.run_id == run_id))
    return max(stored or 0, reserved or 0), session_head_of(conn, tenant, session_id)


def number_events(
    conn: Connection, run_id: str, tenant: str, session_id: str, events: Sequence[pb.RunEvent]
) -> list[StoredEvent]:
    """Number events after the highest seqs the run and its session issued (stored or reserved)."""
    seq, sseq = heads_of(conn, run_id, tenant, session_id)
    stored = []
    for i, event in enumerate(events, start=1):
        event.seq = seq + i
        stored.append(StoredEvent(run_id, seq + i, tenant, session_id, sseq + i, event))
    return stored


def notify_events(conn: Connection, replica: str, events: Sequence[StoredEvent]) -> None:
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
    """Return the run_events row of a stored event (the event as protobuf bytes)."""
    return {
        "run_id": ev.run_id,
        "seq": ev.seq,
        "tenant": ev.tenant,
        "session_id": ev.session_id,
        "session_seq": ev.session_seq,
        "event": ev.event.SerializeToString(),
    }


def stored_of(row: Any) -> StoredEvent:
    """Decode a run_events row."""
    m = row._mapping
    return StoredEvent(
        m["run_id"],
        m["seq"],
        m["tenant"],
        m["session_id"],
        m["session_seq"],
        pb.RunEvent.FromString(m["event"]),
    )
