"""The PostgreSQL limiter store: budget AND consumption shared by every gateway replica.

Two tables (gateway/migrations/versions/0001_limiter.py): `gateway_limiter_budgets` (one row per
bucket: the adaptive budget and the time of its last halving) and `gateway_limiter_entries`
(the sliding-window log: one row per admitted reservation, its time, tokens and whether it
is settled). The rules are rules.py's, written in SQL:

- A reservation attempt is ONE statement, the function `gateway_limiter_reserve`
  (migration 0003), sent outside a transaction (`Database.autocommit`): lock the bucket's
  budget row (`FOR UPDATE`, created with the initial budget on first use), prune the
  bucket's entries older than the span, sum the rest, insert the new entry only if it
  fits, else find the earliest time it could. Attempts on one bucket are therefore
  serialized across all replicas, each sees every entry committed before it, and the row
  lock is held only while the function runs on the server: never across a client round
  trip (the earlier client-driven transaction held it over four, and on a loaded machine
  every attempt queued behind a holder waiting for CPU to send its next statement).
- Settling updates the entry without the lock: a smaller size only frees room later.
- An outcome is one conditional UPDATE of the budget row (halve / probe, honouring the
  cooldown, clamped to this process's floor and max).

The schema is migrated by Alembic in the server's ready hook (`prepare`), under the mesh's
advisory lock, so replicas starting together migrate once.

Timeouts: the engine connects within `store_timeout_seconds` and each statement answers
within it (asyncpg `timeout` and `command_timeout`), so a database that accepts TCP
connections but never answers fails an operation in seconds, not asyncpg's default minute.
Migrations get their own short-lived engine with the same connect timeout and a longer
statement one (`MIGRATION_STATEMENT_TIMEOUT_SECONDS`): a replica may wait there for another
replica's migration under the advisory lock.
"""

from __future__ import annotations

import pathlib

import sqlalchemy as sa

from agentrt.gateway.limiter.rules import Attempt, LimiterSettings
from agentrt.mesh.storage import migrate
from agentrt.mesh.storage.db import Database

MIGRATIONS_DIR = pathlib.Path(__file__).resolve().parent.parent / "migrations"
#: The longest one migration statement (the advisory lock included) may take, in seconds.
MIGRATION_STATEMENT_TIMEOUT_SECONDS = 120.0

metadata = sa.MetaData()

#: One row per bucket: its adaptive budget (input tokens per window).
budgets = sa.Table(
    "gateway_limiter_budgets",
    metadata,
    sa.Column("bucket", sa.Text(), primary_key=True),
    sa.Column("budget_tokens", sa.BigInteger(), nullable=False),
    sa.Column("backoff_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

#: The sliding-window log: one row per admitted reservation, pruned as it leaves the span.
entries = sa.Table(
    "gateway_limiter_entries",
    metadata,
    sa.Column("bucket", sa.Text(), nullable=False),
    sa.Column("entry_id", sa.String(64), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("tokens", sa.BigInteger(), nullable=False),
    sa.Column("settled", sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint("bucket", "entry_id"),
    sa.Index("ix_gateway_limiter_entries_bucket_at", "bucket", "at"),
)

_SPAN = "make_interval(secs => CAST(:span AS double precision))"

# migrations/versions/0003_limiter_reserve.py: lock, prune, sum, admit and the wait, server-side.
_RESERVE = sa.text(
    "SELECT budget, used, pending, admitted, wait_s "
    "FROM gateway_limiter_reserve(:b, :id, CAST(:n AS bigint), CAST(:initial AS bigint), "
    "CAST(:span AS double precision))"
)
_SETTLE = sa.text(
    "UPDATE gateway_limiter_entries SET tokens = coalesce(CAST(:n AS bigint), tokens), settled = true "
    "WHERE bucket = :b AND entry_id = :id AND NOT settled"
)
# limiter.adapt: skipped inside the cooldown, and on success when already at max.
_OUTCOME = sa.text("""
WITH n AS (SELECT clock_timestamp() AS t),
u AS (
  UPDATE gateway_limiter_budgets g SET
    budget_tokens = CASE WHEN :rl THEN greatest(:floor, g.budget_tokens / 2)
                         ELSE least(:max, greatest(:floor, g.budget_tokens + :step)) END,
    backoff_at = CASE WHEN :rl THEN n.t ELSE g.backoff_at END,
    updated_at = n.t
  FROM n
  WHERE g.bucket = :b
    AND (g.backoff_at IS NULL
         OR n.t - g.backoff_at >= make_interval(secs => CAST(:cooldown AS double precision)))
    AND (:rl OR g.budget_tokens < :max)
  RETURNING g.budget_tokens
)
SELECT coalesce((SELECT budget_tokens FROM u),
                (SELECT budget_tokens FROM gateway_limiter_budgets WHERE bucket = :b))
""")
_READ = sa.text(f"""
SELECT (SELECT budget_tokens FROM gateway_limiter_budgets WHERE bucket = :b),
       coalesce(sum(tokens), 0)::bigint, coalesce(sum(tokens) FILTER (WHERE NOT settled), 0)::bigint
FROM gateway_limiter_entries WHERE bucket = :b AND at > clock_timestamp() - {_SPAN}
""")


async def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate the limiter's tables to `revision` (default: the newest); a no-op when there.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a migration step.
    """
    await migrate.upgrade(db, MIGRATIONS_DIR, "agentrt.gateway.migrations", revision)


class PostgresStore:
    """Budgets and logs in PostgreSQL (see the module docstring)."""

    def __init__(
        self, url: str, settings: LimiterSettings, *, pool_size: int = 10, max_overflow: int = 10
    ) -> None:
        """Open the engine (nothing connects until first use).

        Args:
            url: postgresql+asyncpg://... URL.
            settings: the rules' figures.
            pool_size: connections kept open (an attempt holds one for one statement, so
                a few serve many callers; the rest wait for the pool).
            max_overflow: connections opened beyond pool_size under load.

        Raises:
            ValueError: the URL is not a postgresql+asyncpg one.
        """
        if not url.startswith("postgresql+asyncpg://"):
            raise ValueError(f"the postgres limiter needs a postgresql+asyncpg:// URL, got {url!r}")
        timeout = settings.store_timeout_seconds
        self._url = url
        self._db = Database(
            url,
            connect_args={"timeout": timeout, "command_timeout": timeout},
            pool_size=pool_size,
            max_overflow=max_overflow,
        )
        self._s = settings

    async def prepare(self) -> None:
        """Migrate the limiter's tables (Alembic, version table alembic_version_gateway).

        Raises:
            TimeoutError: the database did not accept a connection, or a statement did not
                finish, in time (see the module docstring).
            sqlalchemy.exc.SQLAlchemyError: the database refused a migration step.
        """
        db = Database(
            self._url,
            connect_args={
                "timeout": self._s.store_timeout_seconds,
                "command_timeout": MIGRATION_STATEMENT_TIMEOUT_SECONDS,
            },
        )
        try:
            await upgrade(db)
        finally:
            await db.close()

    async def close(self) -> None:
        """Dispose of the engine."""
        await self._db.close()

    async def try_reserve(self, bucket: str, entry_id: str, tokens: int) -> Attempt:
        """See LimiterStore.try_reserve: one statement, outside a transaction (module docstring).

        An attempt repeated with the entry id of one that was admitted (its answer lost to
        a timeout) is answered admitted again, not counted twice.
        """
        s = self._s
        params = {
            "b": bucket,
            "id": entry_id,
            "n": tokens,
            "initial": s.initial_tokens,
            "span": s.span_seconds,
        }
        async with self._db.autocommit() as conn:
            budget, used, pending, admitted, wait = (await conn.execute(_RESERVE, params)).one()
        budget, used, pending = int(budget), int(used), int(pending)
        if admitted or tokens > budget:
            return Attempt(bool(admitted), budget, used, pending)
        return Attempt(False, budget, used, pending, float(wait))

    async def settle(self, bucket: str, entry_id: str, tokens: int | None) -> None:
        """See LimiterStore.settle."""
        async with self._db.autocommit() as conn:  # one statement: no BEGIN/COMMIT round trips
            await conn.execute(_SETTLE, {"b": bucket, "id": entry_id, "n": tokens})

    async def outcome(self, bucket: str, rate_limited: bool) -> int:
        """See LimiterStore.outcome: one statement; the bucket's initial budget when it has no row."""
        s = self._s
        params = {
            "b": bucket,
            "rl": rate_limited,
            "floor": s.floor_tokens,
            "max": s.max_tokens,
            "step": s.probe_tokens,
            "cooldown": s.cooldown_seconds,
        }
        async with self._db.autocommit() as conn:  # one statement
            budget = await conn.scalar(_OUTCOME, params)
        return s.initial_tokens if budget is None else int(budget)

    async def read(self, bucket: str) -> tuple[int, int, int]:
        """See LimiterStore.read."""
        async with self._db.read() as conn:
            budget, used, pending = (
                await conn.execute(_READ, {"b": bucket, "span": self._s.span_seconds})
            ).one()
        return (self._s.initial_tokens if budget is None else int(budget)), int(used), int(pending)
