"""Where the tests find PostgreSQL and Redis: one place, so a checkout can use its own.

`AGENTRT_TEST_PG_DATABASE` names the PostgreSQL database the shared-table suites use.
When it is unset, importing this module under pytest creates a fresh database for the
session, names it in the environment (child processes inherit it) and drops it when the
process exits; `test` is the fallback when the server does not answer. `AGENTRT_TEST_REDIS_DB` names the Redis
database number (default 0). A fresh database per session means one checkout's migrations
never meet another's code, and a stale Alembic revision never fails a run.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
import uuid

PG_HOST = "127.0.0.1:5432"
_PG_ENV = "AGENTRT_TEST_PG_DATABASE"
_PG_ADMIN_DSN = f"postgresql://postgres@{PG_HOST}/postgres"


def _pg_admin(sql: str) -> bool:
    """Run one statement on the server's `postgres` database; False when it does not answer.

    Runs on its own thread and event loop, so importing this module inside a running loop works.
    """
    done: list[bool] = []

    async def run() -> None:
        import asyncpg

        try:
            conn = await asyncio.wait_for(asyncpg.connect(_PG_ADMIN_DSN), 5)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return
        try:
            await conn.execute(sql)
            done.append(True)
        finally:
            await conn.close()

    thread = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    thread.start()
    thread.join(30)
    return bool(done)


def _session_database() -> str:
    """The database of this test session: the named one, or a fresh one dropped at exit."""
    named = os.environ.get(_PG_ENV)
    if named:
        return named
    if "pytest" not in sys.modules:
        return "test"
    name = f"agentrt_suite_{uuid.uuid4().hex[:12]}"
    if not _pg_admin(f'CREATE DATABASE "{name}"'):
        return "test"
    os.environ[_PG_ENV] = name
    atexit.register(_pg_admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return name


PG_DATABASE = _session_database()
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
