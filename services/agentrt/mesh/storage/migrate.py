"""Alembic plumbing every service that owns tables shares.

A service keeps its own `migrations/` directory and its own version table
(`alembic_version_<service>`), so the services can share one PostgreSQL database without
sharing migration state. `upgrade()` runs on service start (the `ready` hook) inside one
write transaction of the service's own `Database`: on PostgreSQL under a transaction-scoped
advisory lock, so replicas starting together migrate once and the others wait and find
nothing to do; on SQLite under the write lock every writer takes. `run_env()` is the whole
body of a service's `migrations/env.py`.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib

import sqlalchemy as sa
from alembic import command, context
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt.mesh.storage.db import Database

# Alembic narrates every plugin and step at INFO; a service start is not the place for it.
logging.getLogger("alembic").setLevel(logging.WARNING)
log = logging.getLogger("agentrt.mesh")


def _upgrade(connection: Connection, script_location: str, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", script_location)
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


async def upgrade(db: Database, migrations_dir: pathlib.Path, lock_key: str, revision: str = "head") -> None:
    """Migrate db to `revision` (default: the newest) with the scripts in migrations_dir.

    A no-op when already there. `lock_key` names the advisory lock on PostgreSQL.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a migration step (the
            transaction is rolled back, so nothing is half-applied on PostgreSQL).
    """
    async with db.write() as conn:
        if not db.is_sqlite:
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": lock_key})
        await conn.run_sync(_upgrade, str(migrations_dir), revision)
    log.info("%s schema migrated to %s", lock_key, revision)


def run_env(metadata: sa.MetaData, version_table: str) -> None:
    """Run the migrations of an Alembic env.py.

    On the connection the service hands over in `config.attributes["connection"]` (inside
    its own write transaction), or, from the alembic command line, on `-x db=URL`.

    Raises:
        SystemExit: run from the command line without `-x db=URL`.
    """

    def run(connection: Connection) -> None:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            version_table=version_table,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()

    async def run_url(url: str) -> None:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(run)
        finally:
            await engine.dispose()

    connection = context.config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("db") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("pass the database as -x db=URL")
    asyncio.run(run_url(url))
