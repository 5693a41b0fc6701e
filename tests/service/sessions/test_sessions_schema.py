"""The Alembic migrations produce exactly the tables `models` declares, on both backends."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from agentrt.mesh.storage.db import Database
from agentrt.sessions.storage.migrate import upgrade
from agentrt.sessions.storage.models import metadata


def schema_diff(sync_conn) -> list:
    """Differences between the database and `metadata`, over the store's own tables only
    (the PostgreSQL test database also holds other services' tables)."""
    ours = set(metadata.tables)

    def include_name(name, type_, parent_names) -> bool:
        return type_ != "table" or name in ours

    context = MigrationContext.configure(
        sync_conn, opts={"version_table": "alembic_version_sessions", "include_name": include_name}
    )
    return compare_metadata(context, metadata)


async def test_migrations_match_the_models(db_url):
    db = Database(db_url)
    try:
        await upgrade(db)
        await upgrade(db)  # a second run is a no-op
        async with db.read() as conn:
            assert await conn.run_sync(schema_diff) == []
    finally:
        await db.close()
