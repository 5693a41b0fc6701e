"""A turn's session statement on PostgreSQL, one round trip (decision 0025).

The append (AppendEntries) was a client-driven transaction: BEGIN, the claim, the last
entry, the usage check, the seq mint, the insert, COMMIT, each a round trip with the
session row's lock held across them. It is now one call of the function `sessions_append`
(sessions migration 0002, which documents its steps: the same as `sql_sqlite.append`'s),
sent outside a transaction on the pooled driver connection (`Database.driver`, decision 0059):
the statement is the transaction,
the row lock is held only while the function runs on the server, and nothing is written
unless the function returns 'ok'. (The tail an include_tail append returns needs no read:
decision 0057.)

The batch travels as one array per column (asyncpg encodes them in binary); `rows.entry_values`
is the one encoding of an entry's columns.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from agentrt.mesh.storage.db import Database
from agentrt.sessions.domain import Entry, Ref
from agentrt.sessions.storage import appends as A
from agentrt.sessions.storage.rows import entry_values

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


#: The driver's failures that say the database cannot be reached or is going away now: a
#: closed or broken connection (asyncpg's InterfaceError, ConnectionDoesNotExistError, and
#: InternalClientError: its protocol's state error when the server ends the session
#: mid-statement), a connection exception (SQLSTATE class 08), an administrator's shutdown or a crash (57P),
#: no connection slot (53300), a socket error.
UNAVAILABLE = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.TooManyConnectionsError,
    OSError,
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
        UNAVAILABLE's exceptions: the connection failed or the server is going away (the
            caller reports UNAVAILABLE); the statement may or may not have committed.
        asyncpg.PostgresError: any other failure of the statement (INTERNAL).
    """
    try:
        async with db.driver() as conn:
            row = tuple(await conn.fetchrow(_APPEND, *_arguments(tenant, ref, expected, prepared)))
    except asyncpg.IntegrityConstraintViolationError:
        raise A.lost_race() from None
    answer, generation, value, text, turn, response = row
    if answer != "ok":
        raise A.refusal(answer, ref, expected, generation, value, text, turn, response)
    return prepared.stored(value, text), generation
