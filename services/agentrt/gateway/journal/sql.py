"""The SQL model-call journal: one table every gateway replica sees (SQLite or PostgreSQL).

Table `gateway_model_calls` (gateway/migrations/versions/0002_call_journal.py), primary key
(tenant, call_key). Each operation of `JournalStore` is one transaction of one statement
(plus the read-back of `claim`), so the store's invariants (journal/store.py) rest on the
database's own atomicity: `claim` is INSERT ... ON CONFLICT DO NOTHING (exactly one
inserter wins a key), `take_over`, `renew`, `finish` and `release` are conditional UPDATEs
and DELETEs whose row count says whether they applied.

On a SQLite file, `claim` and `finish` (every keyed call's two writes) run first on the
event loop's thread over a kept stdlib connection (journal/inline.py, decision 0022), and
the round-5 way (`write_sync` on the write thread) when another connection holds the lock.

On PostgreSQL `claim` and `finish` are each one statement outside a transaction on the pooled
driver connection (`Database.driver()`, decision 0059; decision 0063): the claim's INSERT ...
ON CONFLICT DO NOTHING commits alone, and only a claim that lost (a repeat, another replica's
call) reads the row in a second statement; the record's conditional UPDATE likewise, with a
second read only when it did not apply. Four and three round trips (BEGIN, the statements,
COMMIT) became one each.

On PostgreSQL lease renewals go through a pool of their own (`RENEW_POOL_SIZE`
connections), so a live holder's renewal never queues behind the other calls' claims,
polls and records. On PostgreSQL every statement answers within `timeout_s` (asyncpg `command_timeout`), so a
database that hangs fails a journal operation in seconds; the journal then answers the call
without its record (journal/calls.py). The schema is migrated by Alembic in `prepare`
(under the mesh's advisory lock on PostgreSQL; replicas starting together migrate once).
"""

from __future__ import annotations

import pathlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url

from agentrt.gateway.journal.inline import InlineSqlite
from agentrt.gateway.journal.store import CLAIMED_COLUMNS, Row, State
from agentrt.mesh.storage import migrate
from agentrt.mesh.storage.db import Database

MIGRATIONS_DIR = pathlib.Path(__file__).resolve().parent.parent / "migrations"
#: PostgreSQL connections reserved for lease renewals (one short UPDATE each), per replica.
RENEW_POOL_SIZE = 2

metadata = sa.MetaData()

#: One row per journaled model call (see journal/store.py for the columns' meaning).
calls = sa.Table(
    "gateway_model_calls",
    metadata,
    sa.Column("tenant", sa.Text(), nullable=False),
    sa.Column("call_key", sa.Text(), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("state", sa.SmallInteger(), nullable=False),
    sa.Column("holder", sa.String(128), nullable=False),
    sa.Column("lease_until_s", sa.Float(), nullable=False),
    sa.Column("takeovers", sa.Integer(), nullable=False),
    sa.Column("response", sa.LargeBinary(), nullable=True),
    sa.Column("created_at_s", sa.Float(), nullable=False),
    sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.PrimaryKeyConstraint("tenant", "call_key"),
    sa.Index("ix_gateway_model_calls_created_at_s", "created_at_s"),
)

_KEY = (calls.c.tenant, calls.c.call_key)


def _is(tenant: str, key: str) -> sa.ColumnElement[bool]:
    return sa.and_(calls.c.tenant == tenant, calls.c.call_key == key)


# The hot path of every keyed model call (claim before asking, finish after) runs prebuilt
# statements with bound parameters, each operation one transaction on the database's own
# thread (mesh.db write_sync): no expression built, no cache key computed per call.
_BY_KEY = sa.and_(calls.c.tenant == sa.bindparam("p_tenant"), calls.c.call_key == sa.bindparam("p_key"))
_CLAIM_VALUES = {
    "tenant": sa.bindparam("p_tenant"),
    "call_key": sa.bindparam("p_key"),
    "fingerprint": sa.bindparam("p_fingerprint"),
    "state": int(State.PENDING),
    "holder": sa.bindparam("p_holder"),
    "lease_until_s": sa.bindparam("p_lease_until_s"),
    "takeovers": 0,
    "response": None,
    "created_at_s": sa.bindparam("p_now_s"),
    "cancel_requested": False,
}
_CLAIMED = sa.select(*(calls.c[name] for name in CLAIMED_COLUMNS)).where(_BY_KEY)
_FINISH = (
    sa.update(calls)
    .where(_BY_KEY, calls.c.state == int(State.PENDING))
    .values(state=int(State.DONE), response=sa.bindparam("p_response"))
)
_FINISHED = sa.select(calls.c.response).where(_BY_KEY, calls.c.state == int(State.DONE))

# The same two operations as the driver's own statements on PostgreSQL (decision 0063).
_PG_CLAIM = (
    "INSERT INTO gateway_model_calls (tenant, call_key, fingerprint, state, holder, lease_until_s, "
    f"takeovers, response, created_at_s, cancel_requested) VALUES ($1, $2, $3, {int(State.PENDING)}, "
    "$4, $5, 0, NULL, $6, false) ON CONFLICT (tenant, call_key) DO NOTHING"
)
_PG_CLAIMED = (
    f"SELECT {', '.join(CLAIMED_COLUMNS)} FROM gateway_model_calls WHERE tenant = $1 AND call_key = $2"
)
_PG_FINISH = (
    f"UPDATE gateway_model_calls SET state = {int(State.DONE)}, response = $3 "
    f"WHERE tenant = $1 AND call_key = $2 AND state = {int(State.PENDING)}"
)
_PG_FINISHED = (
    "SELECT response FROM gateway_model_calls "
    f"WHERE tenant = $1 AND call_key = $2 AND state = {int(State.DONE)}"
)


class SqlJournalStore:
    """JournalStore over SQLAlchemy (see the module docstring)."""

    def __init__(
        self, url: str, *, timeout_s: float = 5.0, pool_size: int = 3, max_overflow: int = 2
    ) -> None:
        """Open the engine for url (sqlite+aiosqlite:///FILE or postgresql+asyncpg://...).

        Raises:
            ValueError: any other URL.
        """
        self._url = url
        self._timeout_s = timeout_s
        self._db = Database(
            url,
            connect_args={"timeout": timeout_s, "command_timeout": timeout_s},
            pool_size=pool_size,
            max_overflow=max_overflow,
        )
        self._insert = sqlite.insert if self._db.is_sqlite else postgresql.insert
        # Holders renew their leases through connections of their own: behind the claims,
        # polls and records of a hundred calls in a few shared connections, renewals of a live
        # holder waited past the lease, and another replica took its call over and asked
        # the provider again (issue 13). SQLite serializes writes anyway: one engine.
        self._renew_db = (
            self._db
            if self._db.is_sqlite
            else Database(
                url,
                connect_args={"timeout": timeout_s, "command_timeout": timeout_s},
                pool_size=RENEW_POOL_SIZE,
                max_overflow=0,
            )
        )
        self._claim = (
            self._insert(calls).values(_CLAIM_VALUES).on_conflict_do_nothing(index_elements=list(_KEY))
        )
        # On a SQLite file, claim and finish run on the loop's thread first (journal/inline.py).
        path = make_url(url).database if self._db.is_sqlite else None
        self._inline = InlineSqlite(path) if path and path != ":memory:" else None

    async def prepare(self) -> None:
        """Migrate the gateway's tables (Alembic, version table alembic_version_gateway).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused a migration step.
        """
        db = Database(self._url, connect_args={"timeout": self._timeout_s, "command_timeout": 120.0})
        try:
            await migrate.upgrade(db, MIGRATIONS_DIR, "agentrt.gateway.migrations")
        finally:
            await db.close()

    async def claim(
        self, tenant: str, key: str, fingerprint: str, holder: str, now_s: float, lease_until_s: float
    ) -> tuple[Row, bool]:
        """See JournalStore.claim."""
        if self._inline is not None:
            got_inline = self._inline.claim(tenant, key, fingerprint, holder, now_s, lease_until_s)
            if got_inline is not None:
                return got_inline
        if not self._db.is_sqlite:
            return await self._pg_claim(tenant, key, fingerprint, holder, now_s, lease_until_s)
        params = {
            "p_tenant": tenant,
            "p_key": key,
            "p_fingerprint": fingerprint,
            "p_holder": holder,
            "p_lease_until_s": lease_until_s,
            "p_now_s": now_s,
        }

        def transaction(conn: sa.Connection) -> tuple[bool, sa.Row[Any]]:
            inserted = conn.execute(self._claim, params).rowcount == 1
            return inserted, conn.execute(_CLAIMED, params).one()

        inserted, got = await self._db.write_sync(transaction)
        return Row.read(got), inserted

    async def _pg_claim(
        self, tenant: str, key: str, fingerprint: str, holder: str, now_s: float, lease_until_s: float
    ) -> tuple[Row, bool]:
        async with self._db.driver() as conn:
            status = await conn.execute(_PG_CLAIM, tenant, key, fingerprint, holder, lease_until_s, now_s)
            if status == "INSERT 0 1":
                return Row(fingerprint, State.PENDING, holder, lease_until_s, created_at_s=now_s), True
            got = await conn.fetchrow(_PG_CLAIMED, tenant, key)
        if got is None:  # swept between the two statements (older than the retention)
            raise LookupError(f"the journal row of {key!r} vanished while it was claimed")
        return Row.read(got), False

    async def take_over(
        self, tenant: str, key: str, old_holder: str, holder: str, now_s: float, lease_until_s: float
    ) -> bool:
        """See JournalStore.take_over."""
        update = (
            sa.update(calls)
            .where(
                _is(tenant, key),
                calls.c.state == int(State.PENDING),
                calls.c.holder == old_holder,
                calls.c.lease_until_s < now_s,
            )
            .values(holder=holder, lease_until_s=lease_until_s, takeovers=calls.c.takeovers + 1)
        )
        async with self._db.write() as conn:
            return (await conn.execute(update)).rowcount == 1

    async def renew(self, tenant: str, key: str, holder: str, lease_until_s: float) -> bool:
        """See JournalStore.renew."""
        update = (
            sa.update(calls)
            .where(_is(tenant, key), calls.c.state == int(State.PENDING), calls.c.holder == holder)
            .values(lease_until_s=lease_until_s)
        )
        async with self._renew_db.write() as conn:
            return (await conn.execute(update)).rowcount == 1

    async def request_cancel(self, tenant: str, key: str) -> bool:
        """See JournalStore.request_cancel."""
        update = (
            sa.update(calls)
            .where(_is(tenant, key), calls.c.state == int(State.PENDING))
            .values(cancel_requested=True)
        )
        async with self._db.write() as conn:
            return (await conn.execute(update)).rowcount == 1

    async def cancel_requested(self, tenant: str, key: str, holder: str) -> bool:
        """See JournalStore.cancel_requested."""
        query = sa.select(calls.c.cancel_requested).where(
            _is(tenant, key), calls.c.state == int(State.PENDING), calls.c.holder == holder
        )
        async with self._renew_db.write() as conn:
            return bool(await conn.scalar(query))

    async def finish(self, tenant: str, key: str, response: bytes, now_s: float) -> bytes:
        """See JournalStore.finish (a row swept meanwhile is not recorded again)."""
        if self._inline is not None:
            done = self._inline.finish(tenant, key, response)
            if done is not None:
                return done[0] or response
        if not self._db.is_sqlite:
            async with self._db.driver() as conn:
                if await conn.execute(_PG_FINISH, tenant, key, response) == "UPDATE 1":
                    return response
                done = await conn.fetchval(_PG_FINISHED, tenant, key)
            return bytes(done) if done is not None else response
        params = {"p_tenant": tenant, "p_key": key, "p_response": response}

        def transaction(conn: sa.Connection) -> bytes | None:
            if conn.execute(_FINISH, params).rowcount == 1:
                return response
            return conn.scalar(_FINISHED, params)

        return (await self._db.write_sync(transaction)) or response

    async def release(self, tenant: str, key: str, holder: str) -> None:
        """See JournalStore.release."""
        delete = sa.delete(calls).where(
            _is(tenant, key), calls.c.state == int(State.PENDING), calls.c.holder == holder
        )
        async with self._db.write() as conn:
            await conn.execute(delete)

    async def sweep(self, now_s: float, ttl_s: float) -> int:
        """See JournalStore.sweep."""
        async with self._db.write() as conn:
            return int(
                (await conn.execute(sa.delete(calls).where(calls.c.created_at_s < now_s - ttl_s))).rowcount
            )

    async def close(self) -> None:
        """Dispose of the engine."""
        if self._inline is not None:
            self._inline.close()
        await self._db.close()
        if self._renew_db is not self._db:
            await self._renew_db.close()
