"""Lease fencing in the run log, on SQLite and PostgreSQL: every log entry carries the token
and owner it was written under, a stale holder's write is refused (nothing is written), and
the log alone shows one holder at a time."""

from __future__ import annotations

import asyncio

import pytest

from agentrt.runs.domain import RunRecord
from agentrt.runs.storage.store import RunStore, lease_overlaps
from agentrt.v1 import run_service_pb2 as pb
from tests.service.runs.harness import (
    STORE_BACKENDS,
    open_run_store,
)


@pytest.fixture(params=STORE_BACKENDS)
async def store(request, tmp_path):
    async with open_run_store(request.param, str(tmp_path), "runs_fencing") as runs:
        yield runs


def _record(run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id, tenant="t", session_id=f"s-{run_id}", agent_name="a", agent_version=1,
        agent=pb.AgentSpec(name="a"), input="go", lease_owner="a", lease_expires_s=0.0, fencing_token=1,
    )  # fmt: skip


async def test_a_stale_holder_is_refused_and_the_log_shows_one_holder_at_a_time(store: RunStore):
    await store.insert_run(_record("r1"), [])
    # a's lease (token 1, from the insert) has expired (ttl 0): b takes it over
    token_b = await store.acquire_lease("r1", "b", 30)
    assert token_b == 2
    assert await store.save("r1", log=[("turn", {"by": "b"})], token=token_b) is not None
    # a wakes up and writes with its superseded token: refused, nothing written
    assert await store.save("r1", changes={"turns": 9}, log=[("turn", {"by": "a"})], token=1) is None
    assert not await store.reserve("r1", 1, 99, 99)
    run = await store.get_run("r1")
    assert run is not None and run.turns == 0
    leases = await store.log_leases("r1")
    assert [(kind, token, owner) for _, kind, token, owner in leases] == [
        ("started", 1, "a"),
        ("turn", 2, "b"),
    ]
    assert lease_overlaps(leases) == []
    # a write without a token (a transition outside an executor) records the lease in force
    await store.release_lease("r1", token_b)
    assert await store.save("r1", log=[("note", {})]) is not None
    assert (await store.log_leases("r1"))[-1][2:] == (2, "")


async def test_racing_acquisitions_mint_one_token_each(store: RunStore):
    await store.insert_run(_record("r2"), [])
    tokens = await asyncio.gather(*(store.acquire_lease("r2", f"o{i}", 0.0) for i in range(6)))
    got = [t for t in tokens if t is not None]
    assert len(got) == len(set(got))  # no token handed to two owners
    for i, token in enumerate(tokens):
        if token is not None:
            await store.save("r2", log=[("turn", {"i": i})], token=token)
    assert lease_overlaps(await store.log_leases("r2")) == []


def test_lease_overlaps_names_a_token_with_two_owners_and_a_step_back():
    log = [(1, "started", 1, "a"), (2, "turn", 2, "b"), (3, "turn", 2, "c"), (4, "turn", 1, "a")]
    problems = lease_overlaps(log)
    assert len(problems) == 2
    assert "token 2 held by 'b' and 'c'" in problems[0]
    assert "under token 1 after token 2" in problems[1]
