"""Bring the tool service's schema to the newest Alembic revision.

`upgrade(db)` runs on service start (the `ready` hook), inside one write transaction of
the service's own `Database`: on PostgreSQL under a transaction-scoped advisory lock, so
replicas starting together migrate once and the others wait and find nothing to do; on
SQLite under the write lock every writer takes.
"""

from __future__ import annotations

import pathlib

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from agentrt.mesh.db import Database

MIGRATIONS_DIR = pathlib.Path(__file__).resolve().parent / "migrations"
_LOCK_KEY = "agentrt.tools.migrations"


def _upgrade(connection: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


async def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate db to `revision` (default: the newest); a no-op when already there.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a migration step.
    """
    async with db.write() as conn:
        if not db.is_sqlite:
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": _LOCK_KEY})
        await conn.run_sync(_upgrade, revision)
