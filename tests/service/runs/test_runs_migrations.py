"""The run loop's schema under Alembic: a fresh database, and one made before migrations existed."""

from __future__ import annotations

import sqlalchemy as sa

from agentrt.mesh.storage.db import Database, sqlite_url
from agentrt.runs.storage import migrate
from agentrt.runs.storage.store import RunStore
from tests.service.runs.harness import fresh_pg_database, pg_server, require_pg

_COLUMNS = (
    "run_id, tenant, session_id, agent_name, agent_version, agent, input, workspace, labels_json, status, "
    "phase, turns, usage, final_output, always_approved_json, pending_input_json, session_last_seq, "
    "consecutive_error_turns, tool_calls, cancel_requested, cancel_reason, lease_owner, lease_expires_s, "
    "fencing_token, create_time_s, update_time_s"
)
_VALUES = (
    ":id, 't', 's', 'a', 0, :b, 'x', '', '{}', 1, 2, 0, :b, '', '[]', '[]', "
    "0, 0, 0, false, '', '', 0, 0, 0, 0"
)
_INSERT = f"INSERT INTO runs ({_COLUMNS}) VALUES ({_VALUES})"


async def _adopts(url: str) -> None:
    db = Database(url)
    try:
        await migrate.upgrade(db, "0001_initial")
        async with db.write() as conn:
            # what create_all left: the tables, no version table, and the race's leftovers
            await conn.execute(sa.text("DROP TABLE alembic_version_runs"))
            for run_id in ("run_a", "run_b"):
                await conn.execute(sa.text(_INSERT), {"id": run_id, "b": b""})
        await RunStore(db).create_tables()  # the ready hook: adopt, then upgrade
        async with db.read() as conn:
            version = await conn.scalar(sa.text("SELECT version_num FROM alembic_version_runs"))
            statuses = dict((await conn.execute(sa.text("SELECT run_id, status FROM runs"))).all())
        assert version == "0004_save_functions"
        assert statuses == {"run_a": 4, "run_b": 1}  # the newest unfinished run is kept
        await RunStore(db).create_tables()  # a second start is a no-op
    finally:
        await db.close()


async def test_a_database_made_before_migrations_is_adopted_on_sqlite(tmp_path):
    await _adopts(sqlite_url(str(tmp_path), "runs"))


async def test_a_database_made_before_migrations_is_adopted_on_postgres():
    await require_pg()
    await _adopts(await fresh_pg_database(pg_server(), "runs_migrate"))
