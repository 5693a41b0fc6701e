"""Lease renewal of a replica holding more runs than one statement can bind, on SQLite and PostgreSQL.

`RunStore.renew_leases` guards every run by (run id, fencing token). One statement binding
them as row values (two parameters per run) failed on PostgreSQL from about 7,500 runs
("stack depth limit exceeded"; asyncpg's 32,767 parameters would have stopped it at 16,384)
and on SQLite past the build's variable limit (32,766 with the upstream default, 250,000 in
Debian's): the renewal raised, so past that size a replica lost every lease it held at once.
PostgreSQL now binds ids and tokens as two arrays; SQLite renews 1,000 runs to a statement,
in one transaction.
"""

from __future__ import annotations

import sqlite3
import time

import pytest
from sqlalchemy import func, insert, select, update

from agentrt.runs.storage.models import RunRow
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import common_pb2 as cpb
from tests.service.runs.harness import (
    STORE_BACKENDS,
    open_run_store,
)

#: Runs held by the replica on PostgreSQL: past asyncpg's bind-parameter limit (2 per run).
PG_RUNS = 20_000
#: SQLite's limit is the build's (SQLITE_MAX_VARIABLE_NUMBER): past it, whatever it is.
SQLITE_RUNS = sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 2 + 1000


@pytest.fixture(params=STORE_BACKENDS)
async def store(request, tmp_path):
    async with open_run_store(request.param, str(tmp_path), "runs_renewal") as runs:
        yield runs


def _row(run_id: str, owner: str, token: int, now: float, cancel: bool = False) -> dict:
    return {
        "run_id": run_id, "tenant": "t", "session_id": f"s-{run_id}", "agent_name": "a", "agent_version": 1,
        "agent": b"", "input": "go", "status": cpb.RUN_STATUS_RUNNING, "phase": 0, "lease_owner": owner,
        "lease_expires_s": now + 5, "fencing_token": token, "create_time_s": now, "update_time_s": now,
        "cancel_requested": cancel,
    }  # fmt: skip


async def test_a_replica_renews_more_leases_than_one_statement_can_bind(store: RunStore):
    count = SQLITE_RUNS if store.db.is_sqlite else PG_RUNS
    now = time.time()
    rows = [_row(f"r{i:06d}", "me", 3, now, cancel=i % 5000 == 0) for i in range(count)]
    rows += [_row("taken", "other", 4, now), _row("superseded", "me", 9, now)]
    async with store.db.write() as conn:
        for start in range(0, len(rows), 5000):
            await conn.execute(insert(RunRow), rows[start : start + 5000])
    tokens = {f"r{i:06d}": 3 for i in range(count)} | {"taken": 3, "superseded": 3}

    lost, canceled = await store.renew_leases("me", tokens, 60.0)

    assert lost == {"taken", "superseded"}  # another owner's, and a token taken over since
    assert canceled == {f"r{i:06d}" for i in range(0, count, 5000)}
    async with store.db.read() as conn:
        renewed = await conn.scalar(
            select(func.count()).select_from(RunRow).where(RunRow.lease_expires_s > now + 30)
        )
        untouched = await conn.scalar(
            select(func.count())
            .select_from(RunRow)
            .where(RunRow.run_id.in_(["taken", "superseded"]), RunRow.lease_expires_s < now + 30)
        )
    assert (renewed, untouched) == (count, 2)
    # A renewal never revives a lease: once lost, the next renewal reports it lost again.
    async with store.db.write() as conn:
        await conn.execute(update(RunRow).where(RunRow.run_id == "r000001").values(lease_owner="other"))
    lost, _ = await store.renew_leases("me", tokens, 60.0)
    assert lost == {"taken", "superseded", "r000001"}
