"""The run's timelines read back: its run log and its events, by run and by session.

The read half of the runs store that the streams and the executors use (RunStore inherits
it; needs `self.db`): the run log in order, stored events by run seq and by session seq,
and the heads a new owner numbers after (the highest seq stored or reserved, so no seq an
earlier owner may have delivered is given to another event, 004 §2.11). On SQLite a long
answer is read on the read thread (`INLINE_ROWS`), so a long run's replay never stalls the loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, func, select

from agentrt.mesh.storage.db import Database
from agentrt.runs.domain import StoredEvent
from agentrt.runs.storage import lite, pg, sql
from agentrt.runs.storage.models import RunEventRow, RunRow

T = TypeVar("T")
#: Rows a SQLite read returns inline on the loop's thread; a longer answer is read again on
#: the read thread (mesh/storage/db.py `offload`), so a long run's replay never stalls the loop.
INLINE_ROWS = 256


class TimelineRows:
    """Reads of the run log and the run events (see the module docstring)."""

    db: Database

    async def read_log(self, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        """Return the run log in order as (seq, kind, payload)."""
        if self.db.is_sqlite:
            rows = await self._lite_rows(lambda conn, limit: lite.read_log(conn, run_id, limit))
        else:
            rows = await pg.read_log(self.db, run_id)
        return [(seq, kind, json.loads(payload)) for seq, kind, payload in rows]

    async def _lite_rows(self, read: Callable[[Connection, int], list[T]]) -> list[T]:
        """Run read(conn, limit) on SQLite, inline when it answers INLINE_ROWS rows or fewer.

        A longer answer is read again, whole, on the read thread: one snapshot either way.
        """
        rows = await self.db.read_sync(lambda conn: read(conn, INLINE_ROWS + 1))
        if len(rows) <= INLINE_ROWS:
            return rows
        return await self.db.read_sync(lambda conn: read(conn, -1), offload=True)

    async def read_events(self, run_id: str, after: int, upto: int | None = None) -> list[StoredEvent]:
        """Return the run's stored events with after < seq <= upto, in seq order."""
        if self.db.is_sqlite:
            return await self._lite_rows(
                lambda conn, limit: lite.read_events(conn, run_id, after, upto, limit)
            )
        return await pg.read_events(self.db, run_id, after, upto)

    async def read_session_events(
        self, tenant: str, session_id: str, after: int, upto: int | None = None
    ) -> list[StoredEvent]:
        """Return the session's stored events with after < session_seq <= upto, in order."""
        query = select(RunEventRow).where(
            RunEventRow.tenant == tenant,
            RunEventRow.session_id == session_id,
            RunEventRow.session_seq > after,
        )
        if upto is not None:
            query = query.where(RunEventRow.session_seq <= upto)
        async with self.db.read() as conn:
            rows = (await conn.execute(query.order_by(RunEventRow.session_seq))).all()
        return [sql.stored_event(r) for r in rows]

    async def event_heads(self, run_id: str, tenant: str, session_id: str) -> tuple[int, int]:
        """Return the run's and its session's highest seq issued: stored or reserved.

        A new owner numbers after these, so no seq an earlier owner may have delivered is
        given to another event.
        """
        return await self.db.read_sync(lambda conn: sql.heads(conn, run_id, tenant, session_id))

    async def last_stored_seq(self, run_id: str) -> int:
        """Return the highest seq of the run's stored events (0 for none); reservations aside."""
        query = select(func.max(RunEventRow.seq)).where(RunEventRow.run_id == run_id)

        def body(conn: Connection) -> int:
            return int(conn.scalar(query) or 0)

        return await self.db.read_sync(body)

    async def run_head(self, run_id: str) -> int:
        """Return the highest seq the run's timeline may have issued (stored or reserved)."""

        def body(conn: Connection) -> int:
            stored = conn.scalar(select(func.max(RunEventRow.seq)).where(RunEventRow.run_id == run_id))
            reserved = conn.scalar(select(RunRow.event_seq_reserved).where(RunRow.run_id == run_id))
            return max(stored or 0, reserved or 0)

        return await self.db.read_sync(body)

    async def session_head(self, tenant: str, session_id: str) -> int:
        """Return the highest seq the session's timeline may have issued (stored or reserved)."""

        def body(conn: Connection) -> int:
            return sql.session_head(conn, tenant, session_id)

        return await self.db.read_sync(body)
