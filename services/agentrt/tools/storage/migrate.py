"""Bring the tool service's schema to the newest Alembic revision (agentrt.mesh.storage.migrate)."""

from __future__ import annotations

import pathlib

from agentrt.mesh.storage import migrate
from agentrt.mesh.storage.db import Database

MIGRATIONS_DIR = pathlib.Path(__file__).resolve().parent / "migrations"
#: The advisory lock replicas migrate under (PostgreSQL). It keeps the name it had before the
#: migrations moved into storage/, so a replica of either layout waits for the other.
_LOCK_KEY = "agentrt.tools.migrations"


async def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate db to `revision` (default: the newest); a no-op when already there.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a migration step.
    """
    await migrate.upgrade(db, MIGRATIONS_DIR, _LOCK_KEY, revision)
