"""Bring the run loop's schema to the newest Alembic revision (agentrt.mesh.storage.migrate).

A database the run loop made before it had migrations (tables from `create_all`, no
`alembic_version_runs`) is adopted: stamped at 0001_initial, which is that schema, then
upgraded like any other. Everything happens in one write transaction (under an advisory
lock on PostgreSQL, as `agentrt.mesh.storage.migrate.upgrade` does), so replicas starting together
migrate once.
"""

from __future__ import annotations

import pathlib

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from agentrt.mesh.storage.db import Database

MIGRATIONS_DIR = pathlib.Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version_runs"
BASELINE = "0001_initial"
_LOCK_KEY = "agentrt.runs.migrations"


def _migrate(connection: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    tables = set(sa.inspect(connection).get_table_names())
    if "runs" in tables and VERSION_TABLE not in tables:
        command.stamp(cfg, BASELINE)
    command.upgrade(cfg, revision)


async def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate db to `revision` (default: the newest); a no-op when already there.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a migration step (rolled back).
    """
    async with db.write() as conn:
        if not db.is_sqlite:
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": _LOCK_KEY})
        await conn.run_sync(_migrate, revision)
