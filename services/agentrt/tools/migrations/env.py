"""Alembic environment of the tool service.

Runs on the connection the service hands over in `config.attributes["connection"]`
(inside the service's own write transaction), or, from the alembic command line, on
`-x db=URL`. The version table is the service's own (`alembic_version_tools`) so the
services can share one PostgreSQL database without sharing migration state.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt.tools.models import Base

VERSION_TABLE = "alembic_version_tools"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_url(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


_connection = context.config.attributes.get("connection")
if _connection is not None:
    _run(_connection)
else:
    _url = context.get_x_argument(as_dictionary=True).get("db") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    if not _url:
        raise SystemExit("pass the database as -x db=URL")
    asyncio.run(_run_url(_url))
