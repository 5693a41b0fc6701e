"""A turn's two session statements on PostgreSQL, one round trip each (decision 0025).

The append (AppendEntries) was a client-driven transaction: BEGIN, the claim, the last
entry, the usage check, the seq mint, the insert, COMMIT, each a round trip with the
session row's lock held across them. It is now one call of the function `sessions_append`
(sessions migration 0002, which documents its steps: the same as `sql_sqlite.append`'s),
sent outside a transaction (`Database.autocommit`): the statement is the transaction,
the row lock is held only while the function runs on the server, and nothing is written
unless the function returns 'ok'.

The read of the log after a seq (the tail an include_tail append returns) is one
statement too: the session's generation, the highest seq of that incarnation and the
entries after the seq, from one snapshot. (The three-statement read of ListEntries has to
read the highest seq before the entries so that an append committed between them is not
counted without its entry; one statement has no between.)

The batch travels as one array per column (asyncpg encodes them in binary); `rows.entry_values`
is the one encoding of an entry's columns.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError

from agentrt.mesh.db import Database
from agentrt.mesh.transient import retry_transient
from agentrt.sessions import appends as A
from agentrt.sessions.domain import Entry, Ref
from agentrt.sessions.rows import ENTRY_COLUMNS, entry_from_tuple, entry_values

#: The batch's columns, in the function's parameter order (after the nine leading ones).
_BATCH_COLUMNS = (
    "kind",
    "item",
    "item_type",
    "call_id",
    "tool_name",
    "payload_json",
    "display_json",
    "run_id",
    "turn",
    "response_id",
    "usage_json",
    "nested_usage_json",
    "target_entry_id",
    "target_call_id",
    "folded_ids_json",
    "summary",
    "leaf_entry_id",
)
_APPEND = (
    "SELECT o_outcome, o_generation, o_value, o_text, o_turn, o_response FROM sessions_append("
    + ", ".join(f"${i}" for i in range(1, 9 + 2 + len(_BATCH_COLUMNS) + 1 + 1))
    + ")"
)
_READ_AFTER = (
    "SELECT s.generation, (SELECT max(m.seq) FROM session_entries m WHERE m.tenant = s.tenant "
    "AND m.session_id = s.session_id AND m.generation = s.generation), "
    + ", ".join(f"e.{c}" for c in ENTRY_COLUMNS)
    + " FROM sessions s LEFT JOIN LATERAL (SELECT "
    + ", ".join(f"x.{c}" for c in ENTRY_COLUMNS)
    + " FROM session_entries x WHERE x.tenant = s.tenant AND x.session_id = s.session_id "
    "AND x.generation = s.generation AND x.seq > $3 ORDER BY x.seq LIMIT $4) e ON true "
    "WHERE s.tenant = $1 AND s.session_id = $2 ORDER BY e.seq"
)


def _arguments(tenant: str, ref: Ref, expected: int | None, prepared: A.Prepared) -> tuple[Any, ...]:
    rows = [entry_values("", "", 0, e) for e in prepared.batch]
    keys = prepared.usage_keys
    return (
        tenant,
        ref.session_id,
        ref.generation,
        expected,
        prepared.now_us,
        prepared.leaf_targets,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        prepared.ids,
        prepared.parents,
        *([row[c] for row in rows] for c in _BATCH_COLUMNS),
        [prepared.now_us] * len(rows),
    )


async def append(
    db: Database, tenant: str, ref: Ref, expected: int | None, prepared: A.Prepared
) -> tuple[list[Entry], int]:
    """Run the append as one statement (see the module docstring).

    Returns:
        (the stored entries in order, the generation that took the write).

    Raises:
        MeshError: what `appends.refusal` returns; ABORTED/SEQ_MISMATCH when the insert met
            the unique positions (unreachable under the row lock: the backstop).
        sqlalchemy.exc.DBAPIError: the database failed (the caller reports UNAVAILABLE);
            the statement may or may not have committed, as a failed COMMIT before.
    """
    try:
        async with db.autocommit() as conn:
            row = tuple(
                (await conn.exec_driver_sql(_APPEND, _arguments(tenant, ref, expected, prepared))).one()
            )
    except IntegrityError:
        raise A.lost_race() from None
    answer, generation, value, text, turn, response = row
    if answer != "ok":
        raise A.refusal(answer, ref, expected, generation, value, text, turn, response)
    return prepared.stored(value, text), generation


async def read_after(
    db: Database, tenant: str, ref: Ref, after_seq: int, count: int
) -> tuple[list[Entry], int]:
    """The log after a seq, in one statement (see the module docstring).

    A transient failure (a lost connection) runs the read again (mesh/transient.py).

    Returns:
        (up to `count` entries with seq > after_seq in seq order, the highest seq stored).

    Raises:
        MeshError: NOT_FOUND/SESSION_NOT_FOUND or NOT_FOUND/STALE_GENERATION.
        sqlalchemy.exc.DBAPIError: the database failed.
    """

    async def once() -> list[Any]:
        async with db.autocommit() as conn:
            return list(
                (await conn.exec_driver_sql(_READ_AFTER, (tenant, ref.session_id, after_seq, count))).all()
            )

    rows = await retry_transient(once, what="read")
    if not rows:
        raise A.refusal(A.NO_SESSION, ref, None, 0, 0, "", 0, "")
    generation, last_seq = rows[0][0], rows[0][1] or 0
    if ref.generation and ref.generation != generation:
        raise A.refusal(A.STALE, ref, None, generation, 0, "", 0, "")
    found = [entry_from_tuple(r[2:]) for r in rows if r[2] is not None]
    return found, max(last_seq, found[-1].seq) if found else last_seq
