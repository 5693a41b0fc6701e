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


#: Which pytest process created the database named in _PG_ENV (its xdist worker id, "" for a
#: process without xdist): a worker never adopts the database of another process.
_PG_OWNER_ENV = "AGENTRT_TEST_PG_DATABASE_OWNER"


def _session_database() -> str:
    """The database of this test session: the named one, or a fresh one dropped at exit.

    A name the user set (no owner recorded) is used as given. A name another pytest process
    created is not: pytest-xdist's controller imports this module too when it loads the initial
    conftests (tests/e2e/conftest.py), and its workers inherit its environment; without the
    owner check every worker would share the controller's database, and one worker's test
    emptying a table (tests/service/tasks/harness.py) would delete another's rows.
    """
    named = os.environ.get(_PG_ENV)
    me = os.environ.get("PYTEST_XDIST_WORKER", "")
    if named and os.environ.get(_PG_OWNER_ENV, me) == me:
        return named
    if "pytest" not in sys.modules:
        return "test"
    name = f"agentrt_suite_{uuid.uuid4().hex[:12]}"
    if not _pg_admin(f'CREATE DATABASE "{name}"'):
        return "test"
    os.environ[_PG_ENV] = name
    os.environ[_PG_OWNER_ENV] = me
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
