"""The session store's reads (004 §2.5c, §2.5e); no grpc here.

Sessions, the raw log, the context view and WatchSession tails; `SessionStore` (store.py)
extends this class with lifecycles and writes.

Reads never take a lock: each runs in one read transaction and sees the last committed
state. The context view is computed from the whole incarnation's log and paged afterwards
(the walk follows parent links, which no range scan expresses; 004 §2.5c's known ceiling).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.core.errors import MeshError, Reason, Status, invalid
from agentrt.mesh.storage.db import Database
from agentrt.mesh.waits import wait_event
from agentrt.sessions import tree
from agentrt.sessions.domain import Entry, Ref, SessionInfo, check_ref
from agentrt.sessions.storage import queries as q
from agentrt.sessions.storage.rows import session_from_row
from agentrt.sessions.watch import Notifier

T = TypeVar("T")

MAX_PAGE = 10_000
DEFAULT_LIST_PAGE = 100
MAX_LIST_PAGE = 1000
_WATCH_BATCH = 500


def _check_cursor(after_seq: int) -> None:
    if after_seq < 0:
        raise invalid(Reason.INVALID_VALUE, "after_seq must not be negative", field="after_seq")


class SessionReads:
    """The read side of the store, over one database (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        *,
        notifier: Notifier | None = None,
        watch_poll_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Create a store over an open `Database` whose tables exist (see `migrate`).

        Args:
            db: the service's database.
            notifier: in-process wake-ups for watchers; a new one when None.
            watch_poll_seconds: the longest a watcher sleeps before re-reading the database,
                in seconds (bounds the delay for appends made by other replicas).
            clock: wall clock in seconds since the epoch.
        """
        self._db = db
        self._notifier = notifier or Notifier()
        self._poll = watch_poll_seconds
        self._clock = clock

    def _now_us(self) -> int:
        return int(self._clock() * 1_000_000)

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """One transaction; a database that cannot be reached is UNAVAILABLE, never an answer.

        004 §2.5e2 "a lookup that failed is not an answer": a store that is down must not
        read as "no such session", so the failure reaches the caller as retryable.
        """
        try:
            async with self._db.write() if write else self._db.read() as conn:
                yield conn
        except (OperationalError, InterfaceError, OSError) as exc:
            raise _unavailable(exc) from exc

    async def _run(self, body: Callable[[AsyncConnection], Coroutine[Any, Any, T]], *, write: bool) -> T:
        """Run a transaction body in one hop (mesh.db write_tx/read_tx); failures as `_tx`.

        For the hot path (AppendEntries, GetContext): the body awaits only the connection.
        """
        try:
            return await (self._db.write_tx(body) if write else self._db.read_tx(body))
        except (OperationalError, InterfaceError, OSError) as exc:
            raise _unavailable(exc) from exc

    async def get(self, tenant: str, ref: Ref) -> SessionInfo:
        """Return a session with its folds (last seq, entry count).

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref), NOT_FOUND/SESSION_NOT_FOUND or STALE_GENERATION.
        """
        check_ref(ref)
        async with self._tx(write=False) as conn:
            return await q.info(conn, tenant, await q.resolve(conn, tenant, ref))

    async def list_sessions(
        self, tenant: str, *, page_size: int = 0, page_token: str = "", include_hidden: bool = False
    ) -> tuple[list[SessionInfo], str]:
        """List sessions newest change first; a page is cut after the hidden filter (004 §2.5e2).

        Args:
            tenant: the caller's tenant.
            page_size: 1..1,000; 0 means 100.
            page_token: from a previous page; "" for the first.
            include_hidden: also list hidden sessions.

        Returns:
            (sessions, the next page's token or "" when this is the last page).

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE (page size out of range, bad token).
        """
        if page_size < 0 or page_size > MAX_LIST_PAGE:
            raise invalid(Reason.INVALID_VALUE, f"page_size must be 0..{MAX_LIST_PAGE}", field="page_size")
        size = page_size or DEFAULT_LIST_PAGE
        query = sa.select(q.S).where(q.S.c.tenant == tenant)
        if not include_hidden:
            query = query.where(q.S.c.hidden.is_(False))
        if page_token:
            t, sid = _read_token(page_token)
            query = query.where(
                sa.or_(q.S.c.update_time_us < t, sa.and_(q.S.c.update_time_us == t, q.S.c.session_id < sid))
            )
        query = query.order_by(q.S.c.update_time_us.desc(), q.S.c.session_id.desc()).limit(size + 1)
        async with self._tx(write=False) as conn:
            rows = (await conn.execute(query)).mappings().all()
            more = len(rows) > size
            rows = rows[:size]
            folds = await q.folds(conn, tenant, rows)
        sessions = [session_from_row(r, *folds.get(r["session_id"], (0, 0))) for r in rows]
        return sessions, (_make_token(rows[-1]["update_time_us"], rows[-1]["session_id"]) if more else "")

    async def list_entries(
        self, tenant: str, ref: Ref, after_seq: int = 0, limit: int = 0
    ) -> tuple[list[Entry], int]:
        """Read the raw log (all branches, nothing folded) on a seq cursor.

        Args:
            tenant: the caller's tenant.
            ref: the session.
            after_seq: entries with seq greater than this (>= 0).
            limit: positive = the first N after the cursor, negative = the most recent N in
                seq order, 0 = all; at most 10,000 either way.

        Returns:
            (entries in seq order, the highest seq stored).

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref, negative cursor), NOT_FOUND.
        """
        check_ref(ref)
        _check_cursor(after_seq)
        count = min(abs(limit) or MAX_PAGE, MAX_PAGE)

        async def body(conn: AsyncConnection) -> tuple[list[Entry], int]:
            session = await q.resolve(conn, tenant, ref)
            # The highest seq first, the entries after: on PostgreSQL (READ COMMITTED) each
            # statement sees what committed before it, so read the other way round an append
            # committed between the two was counted in the seq and missing from the entries.
            # This way the entries' read sees at least what the seq counted (appends to a
            # session commit in seq order), and the seq is raised to the last entry read.
            last = await q.tail(conn, tenant, session)
            found = await q.entries(
                conn, tenant, session["session_id"], session["generation"], after_seq, count, newest=limit < 0
            )
            last_seq = last.seq if last is not None else 0
            return found, max(last_seq, found[-1].seq) if found else last_seq

        # One hop (the run loop reads its session's tail this way every turn).
        return await self._run(body, write=False)

    async def context(
        self, tenant: str, ref: Ref, after_seq: int = 0, limit: int = 0, include_unprojected: bool = False
    ) -> tuple[list[Entry], int, str]:
        """Read the context view (`tree.context_view`), computed from the whole log and paged after.

        Returns:
            (view entries in order, the highest seq stored, the active leaf's entry id).

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref, negative cursor), NOT_FOUND.
        """
        check_ref(ref)
        _check_cursor(after_seq)

        async def body(conn: AsyncConnection) -> list[Entry]:
            return await q.log(conn, tenant, await q.resolve(conn, tenant, ref))

        log = await self._run(body, write=False)
        view = tree.context_view(log, include_unprojected=include_unprojected)
        limit = max(-MAX_PAGE, min(limit, MAX_PAGE))
        return tree.page(view, after_seq, limit), (log[-1].seq if log else 0), tree.current_leaf(log)

    async def watch(self, tenant: str, ref: Ref, after_seq: int = 0) -> AsyncIterator[Entry]:
        """Yield the raw log after `after_seq` in seq order, then each entry as it is appended.

        Ends when the incarnation is deleted (or replaced by a new one) or the consumer
        stops. Wakes at once on appends made in this process and re-reads the database at
        least every `watch_poll_seconds` for appends made by other replicas.

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref, negative cursor), NOT_FOUND (at the start).
        """
        check_ref(ref)
        _check_cursor(after_seq)
        async with self._tx(write=False) as conn:
            gen = (await q.resolve(conn, tenant, ref))["generation"]
        cursor = after_seq
        while True:
            with self._notifier.subscribe(tenant, ref.session_id) as woke:
                async with self._tx(write=False) as conn:
                    row = await q.row(conn, tenant, ref.session_id)
                    batch = await q.entries(
                        conn, tenant, ref.session_id, gen, cursor, _WATCH_BATCH, newest=False
                    )
                if row is None or row["generation"] != gen:
                    return
                for entry in batch:
                    cursor = entry.seq
                    yield entry
                if len(batch) == _WATCH_BATCH:
                    continue
                await wait_event(woke, self._poll)


def _make_token(update_time_us: int, session_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([update_time_us, session_id]).encode()).decode()


def _read_token(token: str) -> tuple[int, str]:
    try:
        t, sid = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(t, int) or not isinstance(sid, str):
            raise ValueError("bad token")
    except (ValueError, TypeError, binascii.Error):
        raise invalid(Reason.INVALID_VALUE, "page_token is malformed", field="page_token") from None
    return t, sid


def _unavailable(exc: Exception) -> MeshError:
    return MeshError(
        Status.UNAVAILABLE,
        Reason.DEPENDENCY_UNAVAILABLE,
        f"the session database is unavailable: {type(exc).__name__}",
        retry_after_seconds=1.0,
    )
