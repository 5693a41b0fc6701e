"""Where the tests find PostgreSQL and Redis: one place, so a checkout can use its own.

`AGENTRT_TEST_PG_DATABASE` names the PostgreSQL database the shared-table suites use
(default `test`, the database every machine here has); `AGENTRT_TEST_REDIS_DB` the Redis
database number (default 0). Two checkouts testing different schemas side by side on one
machine give each its own database, so one's migrations never meet the other's code.
"""

from __future__ import annotations

import asyncio
import os

PG_HOST = "127.0.0.1:5432"
PG_DATABASE = os.environ.get("AGENTRT_TEST_PG_DATABASE", "test")
#: The SQLAlchemy URL of the test database.
PG_URL = f"postgresql+asyncpg://postgres@{PG_HOST}/{PG_DATABASE}"
#: The same database as a libpq DSN (asyncpg.connect).
PG_DSN = f"postgresql://postgres@{PG_HOST}/{PG_DATABASE}"
REDIS_URL = f"redis://127.0.0.1:6379/{os.environ.get('AGENTRT_TEST_REDIS_DB', '0')}"


async def pg_reachable() -> bool:
    """Return True when the test database answers within 5 s."""
    import asyncpg

    try:
        conn = await asyncio.wait_for(asyncpg.connect(PG_DSN), 5)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True
