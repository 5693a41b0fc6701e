"""The SQL statements of the session store, one function per question asked of the tables.

Every function runs on a connection the caller holds inside its transaction; none opens
or commits one. Locking is explicit in the names: `claim` and `lock_row` take the session
row's lock (UPDATE ... RETURNING / SELECT ... FOR UPDATE on PostgreSQL; on SQLite the
writing transaction already excludes every other writer), which is what serializes all
writers of one session (004 §2.5e2 "reading the append point and writing against it").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.core.errors import MeshError, Reason, not_found, quote
from agentrt.sessions.domain import Entry, Ref, SessionInfo
from agentrt.sessions.storage.models import EntryRow, MarkRow, SessionRow
from agentrt.sessions.storage.rows import entry_from_row, entry_values, session_from_row

S = cast(sa.Table, SessionRow.__table__)
E = cast(sa.Table, EntryRow.__table__)
M = cast(sa.Table, MarkRow.__table__)

Row = Any  # a RowMapping of `sessions`

# The statements every append and tail read runs are built once, with bound parameters
# (named p_*), so a call only binds values: SQLAlchemy neither rebuilds the expression nor
# recomputes its cache key (docs/decisions/0017-hot-path.md).
_P_TENANT: Any = sa.bindparam("p_tenant")
_P_SID: Any = sa.bindparam("p_sid")
_P_GEN: Any = sa.bindparam("p_gen")
_P_AFTER: Any = sa.bindparam("p_after")
_P_COUNT: Any = sa.bindparam("p_count")
_ONE_SESSION = sa.and_(S.c.tenant == _P_TENANT, S.c.session_id == _P_SID)
_ONE_INCARNATION = sa.and_(E.c.tenant == _P_TENANT, E.c.session_id == _P_SID, E.c.generation == _P_GEN)
_ROW = sa.select(S).where(_ONE_SESSION)
_ROW_LOCKED = _ROW.with_for_update()
_P_NOW: Any = sa.bindparam("p_now")
_CLAIM = (
    S.update()
    .where(_ONE_SESSION)
    .values(update_time_us=sa.case((S.c.update_time_us < _P_NOW, _P_NOW), else_=S.c.update_time_us))
    .returning(*S.c)
)
_TAIL = (
    sa.select(E.c.seq, E.c.entry_id, E.c.kind, E.c.leaf_entry_id)
    .where(_ONE_INCARNATION)
    .order_by(E.c.seq.desc())
    .limit(1)
)
_AFTER = sa.select(E).where(_ONE_INCARNATION, E.c.seq > _P_AFTER).limit(_P_COUNT)
_OLDEST_AFTER, _NEWEST_AFTER = _AFTER.order_by(E.c.seq), _AFTER.order_by(E.c.seq.desc())
_INSERT_ENTRIES = E.insert()
_MINT_SEQS = (
    M.update()
    .where(M.c.tenant == _P_TENANT, M.c.session_id == _P_SID)
    .values(last_seq=M.c.last_seq + _P_COUNT)
    .returning(M.c.last_seq)
)


def _incarnation(tenant: str, session: Row) -> dict[str, Any]:
    return {"p_tenant": tenant, "p_sid": session["session_id"], "p_gen": session["generation"]}


def stale(ref: Ref, current: int) -> MeshError:
    """NOT_FOUND/STALE_GENERATION for a ref naming a dead incarnation, or one above the current."""
    state = "is gone" if ref.generation < current else "was never made"
    return not_found(
        Reason.STALE_GENERATION,
        f"session {quote(ref.session_id)} generation {ref.generation} {state} (current is {current})",
        session_id=ref.session_id,
    )


def no_session(session_id: str, field: str = "session.session_id") -> MeshError:
    """NOT_FOUND/SESSION_NOT_FOUND for an id with no live session (for this tenant)."""
    return not_found(
        Reason.SESSION_NOT_FOUND, f"session {quote(session_id)} not found", session_id=session_id, field=field
    )


def _check(row: Row | None, ref: Ref) -> Row:
    if row is None:
        raise no_session(ref.session_id)
    if ref.generation and ref.generation != row["generation"]:
        raise stale(ref, row["generation"])
    return row


def of(tenant: str, session_id: str, generation: int) -> Any:
    """The WHERE clause selecting one incarnation's entries."""
    return sa.and_(E.c.tenant == tenant, E.c.session_id == session_id, E.c.generation == generation)


async def row(conn: AsyncConnection, tenant: str, session_id: str, *, lock: bool = False) -> Row | None:
    """Return the live session row of (tenant, id), or None; `lock` takes its row lock."""
    query = _ROW_LOCKED if lock else _ROW
    return (await conn.execute(query, {"p_tenant": tenant, "p_sid": session_id})).mappings().first()


async def resolve(conn: AsyncConnection, tenant: str, ref: Ref, *, lock: bool = False) -> Row:
    """Return the session row `ref` names.

    Raises:
        MeshError: NOT_FOUND/SESSION_NOT_FOUND or NOT_FOUND/STALE_GENERATION.
    """
    return _check(await row(conn, tenant, ref.session_id, lock=lock), ref)


async def claim(conn: AsyncConnection, tenant: str, ref: Ref, now_us: int) -> Row:
    """Lock the session row, move its change record to now (never backwards) and return it.

    One statement proves the session exists, serializes writers and records the change
    (004 §2.5e2 "a write and the record that it happened" are one step). A failure later in
    the transaction rolls the change record back with the rest.

    Raises:
        MeshError: NOT_FOUND/SESSION_NOT_FOUND or NOT_FOUND/STALE_GENERATION.
    """
    result = await conn.execute(_CLAIM, {"p_tenant": tenant, "p_sid": ref.session_id, "p_now": now_us})
    return _check(result.mappings().first(), ref)


async def tail(conn: AsyncConnection, tenant: str, session: Row) -> Entry | None:
    """Return the incarnation's last entry (seq, id, kind and leaf target only), or None."""
    found = (await conn.execute(_TAIL, _incarnation(tenant, session))).first()
    if found is None:
        return None
    return Entry(kind=found.kind, seq=found.seq, entry_id=found.entry_id, leaf_entry_id=found.leaf_entry_id)


async def log(conn: AsyncConnection, tenant: str, session: Row) -> list[Entry]:
    """Return the incarnation's whole log in seq order."""
    result = await conn.execute(
        sa.select(E).where(of(tenant, session["session_id"], session["generation"])).order_by(E.c.seq)
    )
    return [entry_from_row(r) for r in result.mappings()]


async def entries(
    conn: AsyncConnection,
    tenant: str,
    session_id: str,
    generation: int,
    after_seq: int,
    count: int,
    newest: bool,
) -> list[Entry]:
    """Return up to `count` entries with seq > after_seq, in seq order (the newest ones when `newest`)."""
    params = {"p_tenant": tenant, "p_sid": session_id, "p_gen": generation, "p_after": after_seq}
    result = await conn.execute(_NEWEST_AFTER if newest else _OLDEST_AFTER, {**params, "p_count": count})
    found = [entry_from_row(r) for r in result.mappings()]
    if newest:
        found.reverse()
    return found


async def kinds_of(conn: AsyncConnection, tenant: str, session: Row, ids: Iterable[str]) -> dict[str, str]:
    """Return {entry_id: kind} for those of `ids` stored in the incarnation."""
    ids = list(ids)
    if not ids:
        return {}
    result = await conn.execute(
        sa.select(E.c.entry_id, E.c.kind).where(
            of(tenant, session["session_id"], session["generation"]), E.c.entry_id.in_(ids)
        )
    )
    return {r[0]: r[1] for r in result.all()}


async def folds(conn: AsyncConnection, tenant: str, rows: Sequence[Row]) -> dict[str, tuple[int, int]]:
    """Return {session_id: (last seq, entry count)} of the given sessions' current incarnations."""
    if not rows:
        return {}
    generations = {r["session_id"]: r["generation"] for r in rows}
    result = await conn.execute(
        sa.select(E.c.session_id, E.c.generation, sa.func.max(E.c.seq), sa.func.count())
        .where(E.c.tenant == tenant, E.c.session_id.in_(list(generations)))
        .group_by(E.c.session_id, E.c.generation)
    )
    return {sid: (last, count) for sid, gen, last, count in result.all() if generations.get(sid) == gen}


async def info(conn: AsyncConnection, tenant: str, session: Row) -> SessionInfo:
    """Return the domain session of a row with its folds."""
    last, count = (await folds(conn, tenant, [session])).get(session["session_id"], (0, 0))
    return session_from_row(session, last, count)


async def mint_seqs(conn: AsyncConnection, tenant: str, session_id: str, count: int) -> int:
    """Reserve `count` seqs from the never-deleted high-water mark.

    Returns:
        The last seq issued before them: the new seqs are that + 1 .. that + count.
    """
    result = await conn.execute(_MINT_SEQS, {"p_tenant": tenant, "p_sid": session_id, "p_count": count})
    return int(result.scalar_one()) - count


async def mint_generation(conn: AsyncConnection, tenant: str, session_id: str, *, first: bool = False) -> int:
    """Return a new generation for (tenant, id), creating its marks row on first use.

    `first`: the id was minted just now, so it has no marks row: insert it at once (one
    statement fewer). A concurrent first use of the same id fails the insert
    (IntegrityError), which the caller reports as the id being taken.
    """
    first_row = M.insert().values(tenant=tenant, session_id=session_id, last_seq=0, last_generation=1)
    if first:
        await conn.execute(first_row)
        return 1
    result = await conn.execute(
        M.update()
        .where(M.c.tenant == tenant, M.c.session_id == session_id)
        .values(last_generation=M.c.last_generation + 1)
        .returning(M.c.last_generation)
    )
    gen = result.scalar_one_or_none()
    if gen is not None:
        return int(gen)
    await conn.execute(first_row)
    return 1


async def insert_session(conn: AsyncConnection, values: dict[str, Any]) -> None:
    """Insert a session row (values keyed by column; metadata already a dict)."""
    stored = {k: v for k, v in values.items() if k != "metadata"}
    stored["metadata_json"] = json.dumps(values["metadata"], sort_keys=True)
    await conn.execute(S.insert().values(**stored))


async def insert_entries(conn: AsyncConnection, tenant: str, session: Row, batch: Sequence[Entry]) -> None:
    """Insert stored (seq-assigned) entries into the incarnation."""
    if batch:
        values = [entry_values(tenant, session["session_id"], session["generation"], e) for e in batch]
        await conn.execute(_INSERT_ENTRIES, values)


async def delete_entries(conn: AsyncConnection, tenant: str, session_id: str, generation: int) -> int:
    """Delete an incarnation's entries; return how many."""
    result = await conn.execute(E.delete().where(of(tenant, session_id, generation)))
    return int(result.rowcount or 0)


async def delete_session(
    conn: AsyncConnection, tenant: str, session_id: str, generation: int
) -> tuple[int, list[tuple[str, int]]]:
    """Delete one incarnation: its row first, then its entries.

    The row goes first: it is the proof a concurrent writer checks (004 §2.5e2).

    Returns:
        (entries removed, the (id, generation) of the hidden sessions that served it).
    """
    await conn.execute(
        S.delete().where(S.c.tenant == tenant, S.c.session_id == session_id, S.c.generation == generation)
    )
    removed = await delete_entries(conn, tenant, session_id, generation)
    children = await conn.execute(
        sa.select(S.c.session_id, S.c.generation)
        .where(
            S.c.tenant == tenant,
            S.c.parent_session_id == session_id,
            S.c.parent_generation == generation,
            S.c.hidden.is_(True),
        )
        .with_for_update()
    )
    return removed, [(c[0], c[1]) for c in children.all()]
