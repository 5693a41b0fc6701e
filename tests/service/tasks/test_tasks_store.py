"""The task store on both backends: every transition's predicate, and writers racing on it.

Store-level tests need no mesh: rows are built directly. Races run each writer on its own
Database (its own connections), as two replicas would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from agentrt.core.errors import MeshError
from agentrt.mesh.storage.db import Database
from agentrt.tasks.domain import Failure, Outcome, Task, TaskStatus, new_launch_id
from agentrt.tasks.storage.migrate import upgrade
from agentrt.tasks.storage.models import metadata
from agentrt.tasks.storage.store import Replay, TaskStore
from agentrt.tasks.storage.upkeep import CLAIMED, UpkeepStore
from tests.service.tasks.harness import BACKENDS, tasks_db_url

FAILED = Outcome(TaskStatus.FAILED, failure=Failure("k", "boom"))


@pytest.fixture(params=BACKENDS)
async def db(request, tmp_path) -> AsyncIterator[Database]:
    url = await tasks_db_url(request.param, str(tmp_path))
    database = Database(url)
    await upgrade(database)
    yield database
    await database.close()


def _task(tenant: str, parent: str = "ses_p", **kw) -> Task:
    values = {
        "tenant": tenant, "task_id": "tsk_" + uuid.uuid4().hex[:12], "parent_session_id": parent,
        "parent_generation": 1, "status": TaskStatus.WORKING, "launch_id": new_launch_id(), "input": "go",
        "owner": "me", "lease_until": time.time() + 60, "session_id": "ses_h" + uuid.uuid4().hex[:8],
    }  # fmt: skip
    values.update(kw)
    return Task(**values)  # type: ignore[arg-type]


@pytest.fixture
def tenant() -> str:
    return "t-" + uuid.uuid4().hex[:12]


async def _bound(store: TaskStore, task: Task, run_id: str = "run_1") -> Task:
    claimed = await store.claim_spawn(task, 6)
    bound = await store.bind_run(claimed, claimed.launch_id, run_id)
    assert bound is not None
    return bound


def _schema_diff(sync_conn) -> list:
    ours = set(metadata.tables)

    def include_name(name, type_, parent_names) -> bool:
        return type_ != "table" or name in ours

    context = MigrationContext.configure(
        sync_conn, opts={"version_table": "alembic_version_tasks", "include_name": include_name}
    )
    return compare_metadata(context, metadata)


async def test_migrations_match_the_models(db):
    await upgrade(db)  # a second run is a no-op
    async with db.read() as conn:
        assert await conn.run_sync(_schema_diff) == []


async def test_the_spawn_claim_is_capped_per_parent_and_replayed_by_key(db, tenant):
    store = TaskStore(db)
    for _ in range(2):
        await store.claim_spawn(_task(tenant), 2)
    with pytest.raises(MeshError) as info:
        await store.claim_spawn(_task(tenant), 2)
    assert info.value.reason == "TASK_LIMIT"
    await store.claim_spawn(_task(tenant, parent="ses_other"), 2)  # another parent has its own slots
    first = await store.claim_spawn(_task(tenant, parent="ses_k", idempotency_key="k1"), 6)
    with pytest.raises(Replay) as replay:
        await store.claim_spawn(_task(tenant, parent="ses_k", idempotency_key="k1"), 6)
    assert replay.value.task.task_id == first.task_id


async def test_bind_and_pause_name_their_launch(db, tenant):
    store = TaskStore(db)
    claimed = await store.claim_spawn(_task(tenant), 6)
    assert await store.mark_input_required(claimed, claimed.launch_id) is None  # no run bound yet
    assert await store.bind_run(claimed, "tl_other", "run_x") is None
    bound = await store.bind_run(claimed, claimed.launch_id, "run_1")
    assert bound.run_id == "run_1" and bound.change_seq > claimed.change_seq
    assert await store.bind_run(bound, bound.launch_id, "run_2") is None  # bound once
    paused = await store.mark_input_required(bound, bound.launch_id)
    assert paused.status == TaskStatus.INPUT_REQUIRED
    assert await store.mark_input_required(paused, paused.launch_id) is None
    assert await store.reclaim_working(paused, "tl_stale") is None
    assert (await store.reclaim_working(paused, paused.launch_id)).status == TaskStatus.WORKING


async def test_finalize_is_a_compare_and_set_on_the_launch(db, tenant):
    store = TaskStore(db, notify_grace_s=0)
    bound = await _bound(store, _task(tenant, state="s0"))
    assert await store.finalize(bound, "tl_stale", FAILED, "") is None
    done = await store.finalize(
        bound, bound.launch_id, Outcome(TaskStatus.COMPLETED, output="r"), "r", state="s1"
    )
    assert (done.status, done.result, done.summary, done.state) == (TaskStatus.COMPLETED, "r", "r", "s1")
    assert done.delivery_id and done.owner == "" and done.lease_until is None
    assert await store.finalize(done, done.launch_id, FAILED, "") is None  # terminal: not again
    other = await _bound(store, _task(tenant, state="keep"))
    canceled = await store.finalize(other, other.launch_id, Outcome(TaskStatus.CANCELED), "")
    assert canceled.delivery_id == "" and canceled.state == "keep"  # a cancellation owes nothing


async def test_advance_chains_under_its_bound(db, tenant):
    store = TaskStore(db)
    bound = await _bound(store, _task(tenant, steps=("a", "b")))
    nxt = new_launch_id()
    lease = {"owner": "me", "lease_until_s": time.time() + 60}
    assert await store.advance(bound, "tl_stale", nxt, 50, **lease) is None
    moved = await store.advance(bound, bound.launch_id, nxt, 50, **lease)
    assert (moved.launch_id, moved.run_id, moved.step, moved.continuations) == (nxt, "", 1, 1)
    rebound = await store.bind_run(moved, nxt, "run_2")
    assert await store.advance(rebound, nxt, new_launch_id(), 1, **lease) is None  # at the bound
    assert await store.finalize(rebound, bound.launch_id, FAILED, "") is None  # the old run's word is void


async def test_advance_takes_the_lease_of_the_next_launch(db, tenant):
    """The replica chaining the next run holds its launch from the first moment: not on what
    was left of the previous launch's lease, nor under the name of a replica that had adopted
    the row; so another replica's sweep does not take it for an interrupted launch, and the
    chaining replica's renewals hold it (decision 0052)."""
    store, upkeep = TaskStore(db), UpkeepStore(db)
    now = time.time()
    bound = await _bound(store, _task(tenant, steps=("a",), owner="adopter", lease_until=now - 1))
    nxt = new_launch_id()
    moved = await store.advance(bound, bound.launch_id, nxt, 50, owner="chainer", lease_until_s=now + 60)
    assert moved is not None and moved.owner == "chainer"
    assert moved.lease_until == pytest.approx(now + 60, abs=1e-3)
    swept = await upkeep.fail_orphans(time.time(), Failure("interrupted", "x"), 0.0)
    assert moved.task_id not in {t.task_id for t in swept}
    assert (await store.get(tenant, moved.task_id)).status == TaskStatus.WORKING
    key = (tenant, moved.task_id, nxt)
    assert await upkeep.renew("chainer", {key}, now + 90) == {key}


async def test_retry_claim_under_the_ceiling_and_release(db, tenant):
    store = TaskStore(db)
    bound = await _bound(store, _task(tenant, max_attempts=2))
    failed = await store.finalize(bound, bound.launch_id, FAILED, "boom")
    assert failed.delivery_id
    with pytest.raises(MeshError) as info:
        await store.retry_claim(failed.with_changes(attempt=7), new_launch_id(), "me", time.time() + 9, 6)
    assert info.value.reason == "RETRY_CONFLICT"  # not the attempt it read
    launch = new_launch_id()
    claimed = await store.retry_claim(failed, launch, "me", time.time() + 9, 6)
    assert (claimed.status, claimed.attempt, claimed.launch_id, claimed.result) == (
        TaskStatus.WORKING,
        2,
        launch,
        "",
    )
    assert claimed.delivery_id == ""  # the retry drops the undelivered ending
    released = await store.release_retry_claim(claimed, launch, Failure("launch_failed", "no run"))
    assert (released.status, released.attempt, released.result) == (TaskStatus.FAILED, 1, "no run")
    assert released.delivery_id  # the launch failure is owed like any ending
    assert await store.release_retry_claim(released, launch, Failure("x", "y")) is None
    again = await store.retry_claim(released, new_launch_id(), "me", time.time() + 9, 6)
    rebound = await store.bind_run(again, again.launch_id, "run_2")
    last = await store.finalize(rebound, again.launch_id, FAILED, "")
    with pytest.raises(MeshError) as info:
        await store.retry_claim(last, new_launch_id(), "me", time.time() + 9, 6)
    assert info.value.reason == "TASK_ATTEMPTS_EXHAUSTED"  # the ceiling is the store's predicate


async def test_two_writers_racing_for_the_last_attempt(db, tenant):
    store = TaskStore(db)
    bound = await _bound(store, _task(tenant))
    failed = await store.finalize(bound, bound.launch_id, FAILED, "")
    second = Database(db.url)
    try:
        results = await asyncio.gather(
            store.retry_claim(failed, new_launch_id(), "a", time.time() + 9, 6),
            TaskStore(second).retry_claim(failed, new_launch_id(), "b", time.time() + 9, 6),
            return_exceptions=True,
        )
    finally:
        await second.close()
    won = [r for r in results if isinstance(r, Task)]
    lost = [r for r in results if isinstance(r, MeshError)]
    assert len(won) == 1 and len(lost) == 1 and lost[0].reason in ("RETRY_CONFLICT", "TASK_NOT_RETRYABLE")
    assert (await store.get(tenant, bound.task_id)).launch_id == won[0].launch_id


async def test_the_sweep_fails_only_what_was_left_mid_launch(db, tenant):
    store, upkeep = TaskStore(db), UpkeepStore(db)
    now = time.time()
    left = await store.claim_spawn(_task(tenant, owner="dead", lease_until=now - 1), 6)
    mine = await store.claim_spawn(_task(tenant, owner="me-before", lease_until=now + 60), 6)
    alive = await store.claim_spawn(_task(tenant, owner="alive", lease_until=now + 60), 6)
    running = await _bound(store, _task(tenant, owner="dead", lease_until=now - 1))
    waiting = await _bound(store, _task(tenant, owner="dead", lease_until=now - 1))
    paused = await store.mark_input_required(waiting, waiting.launch_id)
    swept = await upkeep.fail_orphans(now, Failure("interrupted", "x"), 0.0, stale_owner="me-before")
    ours = {t.task_id for t in swept if t.tenant == tenant}
    assert ours == {left.task_id, mine.task_id}
    assert all(t.status == TaskStatus.FAILED and t.delivery_id for t in swept)
    assert (await store.get(tenant, alive.task_id)).status == TaskStatus.WORKING
    assert (await store.get(tenant, running.task_id)).status == TaskStatus.WORKING  # adopted, not failed
    assert (
        await store.get(tenant, paused.task_id)
    ).status == TaskStatus.INPUT_REQUIRED  # its approval persists
    adoptable = {t.task_id for t in await upkeep.adoptable(now, 100) if t.tenant == tenant}
    assert running.task_id in adoptable and alive.task_id not in adoptable
    row = await store.get(tenant, running.task_id)
    assert (await upkeep.adopt(row, "new", now, now + 60)).owner == "new"
    assert await upkeep.adopt(row, "third", now, now + 60) is None  # the lease is live now
    key = (tenant, running.task_id, running.launch_id)
    assert await upkeep.renew("new", {key, (tenant, alive.task_id, alive.launch_id)}, now + 90) == {key}


async def test_a_delivery_is_claimed_once_held_or_acknowledged(db, tenant):
    store, upkeep = TaskStore(db, notify_grace_s=0), UpkeepStore(db)
    bound = await _bound(store, _task(tenant))
    done = await store.finalize(bound, bound.launch_id, Outcome(TaskStatus.COMPLETED, output="r"), "r")
    now = time.time() + 1
    assert done.task_id in {t.task_id for t in await upkeep.due_deliveries(now, 100)}
    assert await upkeep.hold(done, done.delivery_id, now + 60)
    assert await upkeep.claim_delivery(done, now, now + 30) is None  # held
    assert await upkeep.ack(done, "td_other") is None
    acked = await upkeep.ack(done, done.delivery_id)
    assert acked.delivery_id == "" and acked.notified_seq == 0
    other = await _bound(store, _task(tenant))
    ended = await store.finalize(other, other.launch_id, FAILED, "boom")
    claimed, base = await upkeep.claim_delivery(ended, now, now + 30)
    assert base == CLAIMED and await upkeep.claim_delivery(ended, now, now + 30) is None
    assert not await upkeep.hold(ended, ended.delivery_id, now + 60)  # a deliverer has begun
    assert await upkeep.set_delivery_base(ended, ended.delivery_id, 41)
    assert not await upkeep.set_delivery_base(ended, ended.delivery_id, 99)  # recorded once
    delivered = await upkeep.delivered(claimed, ended.delivery_id, 42)
    assert delivered.notified_seq == 42 and delivered.delivery_id == ""


async def test_removing_a_tree_takes_every_depth(db, tenant):
    store, upkeep = TaskStore(db), UpkeepStore(db)
    outer = await _bound(store, _task(tenant, parent="ses_root", session_id="ses_h1", session_generation=1))
    inner = await _bound(
        store, _task(tenant, parent="ses_h1", session_id="ses_h2", session_generation=1, depth=2)
    )
    beside = await _bound(store, _task(tenant, parent="ses_root", parent_generation=2))
    removed = await upkeep.remove_tree(tenant, "ses_root", 1)
    assert {t.task_id for t in removed} == {outer.task_id, inner.task_id}
    assert await store.get(tenant, inner.task_id) is None
    assert await store.get(tenant, beside.task_id) is not None  # another incarnation's
    assert await upkeep.parent_generations(tenant, "ses_root") == [2]
    assert await store.finalize(outer, outer.launch_id, FAILED, "") is None  # a removed row takes no writes


async def test_a_claim_given_back_before_reading_the_parent_may_be_held_again(db, tenant):
    store, upkeep = TaskStore(db, notify_grace_s=0), UpkeepStore(db)
    bound = await _bound(store, _task(tenant))
    done = await store.finalize(bound, bound.launch_id, Outcome(TaskStatus.COMPLETED, output="r"), "r")
    now = time.time() + 1
    claimed, base = await upkeep.claim_delivery(done, now, now + 30)
    assert base == CLAIMED
    assert await upkeep.release_delivery(claimed, done.delivery_id, now)  # nothing was appended
    assert await upkeep.hold(done, done.delivery_id, now + 60)
    again = await upkeep.claim_delivery(done, now + 61, now + 90)
    assert again is not None and again[1] == CLAIMED
    assert await upkeep.set_delivery_base(done, done.delivery_id, 7)
    assert await upkeep.release_delivery(done, done.delivery_id, now)  # a recorded seq is kept
    assert (await upkeep.claim_delivery(done, now + 91, now + 120))[1] == 7
