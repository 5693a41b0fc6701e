"""Bring the session store's schema to the newest Alembic revision.

`upgrade(db)` runs on service start (the `ready` hook), inside one write transaction of
the service's own `Database`: on PostgreSQL under a transaction-scoped advisory lock, so
replicas starting together migrate once and the others wait and find nothing to do; on
SQLite under the write lock every writer takes.
"""

from __future__ import annotations

import logging
import pathlib

# Alembic narrates every plugin and step at INFO; a service start is not the place for it.
logging.getLogger("alembic").setLevel(logging.WARNING)

import sqlalchemy as sa  # noqa: E402
from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from sqlalchemy.engine import Connection  # noqa: E402

from agentrt.mesh.db import Database  # noqa: E402

log = logging.getLogger("agentrt.sessions")

MIGRATIONS_DIR = pathlib.Path(__file__).resolve().parent / "migrations"
_LOCK_KEY = "agentrt.sessions.migrations"


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: Connection, revision: str) -> None:
    command.upgrade(_config(connection), revision)


async def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate db to `revision` (default: the newest); a no-op when already there.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a migration step (the
            transaction is rolled back, so nothing is half-applied on PostgreSQL).
    """
    async with db.write() as conn:
        if not db.is_sqlite:
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": _LOCK_KEY})
        await conn.run_sync(_upgrade, revision)
    log.info("sessions schema migrated to %s", revision)
