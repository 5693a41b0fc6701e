"""The run store's hot paths on SQLite and PostgreSQL (decision 0026): what they write reads back.

On SQLite the save point, the insert of a run and the turn's reads run the driver's
statements (runs/storage/lite.py); on PostgreSQL the save point and the insert are one call
of a server-side function (runs migration 0004, runs/storage/pg.py) and the reads one
statement each. Each test runs on a real database of each backend and asserts what is
stored: every column a save can change, the refusals that write nothing, the conflicts of
an insert, the numbering of events, a replay longer than the inline bound, and (SQLite)
that a lock held elsewhere still leaves as the error mesh/storage/db.py falls back on.
"""

from __future__ import annotations

import importlib
import sqlite3
import time

import pytest
from sqlalchemy.exc import OperationalError

from agentrt.mesh.storage.db import Database, lock_taken
from agentrt.runs.domain import Answers, RunRecord, StoredEvent
from agentrt.runs.storage import lite as store_lite
from agentrt.runs.storage.models import RunRow
from agentrt.runs.storage.records import COLUMNS
from agentrt.runs.storage.store import RunStore, SessionBusy
from agentrt.runs.storage.timeline import INLINE_ROWS
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.service.runs.harness import (
    STORE_BACKENDS,
    fresh_pg_database,
    open_run_store,
    pg_server,
    require_pg,
)


@pytest.fixture(params=STORE_BACKENDS)
async def store(request, tmp_path):
    async with open_run_store(request.param, str(tmp_path), "runs_paths") as runs:
        yield runs


def _record(run_id: str, session_id: str = "", key: str | None = None) -> RunRecord:
    now = time.time()
    return RunRecord(
        run_id=run_id, tenant="t", session_id=session_id or f"s-{run_id}", agent_name="a", agent_version=1,
        agent=pb.AgentSpec(name="a", instructions="be brief"), input="go", idempotency_key=key,
        lease_owner="a", lease_expires_s=now + 60, fencing_token=1, create_time_s=now, update_time_s=now,
    )  # fmt: skip


def _event(run_id: str, seq: int, session_seq: int) -> StoredEvent:
    event = pb.RunEvent(seq=seq, run_id=run_id, diagnostic=pb.Diagnostic(code="c", message=f"event {seq}"))
    return StoredEvent(run_id, seq, "t", f"s-{run_id}", session_seq, event)


async def test_a_save_of_every_column_reads_back_the_same(store: RunStore):
    await store.insert_run(_record("r1"), [])
    call = cpb.ToolCall(call_id="c1", name="read_file", arguments='{"path": "a"}')
    changes = {
        "tenant": "t", "session_id": "s-r1", "agent_name": "b", "agent_version": 3,
        "agent": pb.AgentSpec(name="b", instructions="\u00e9t\u00e9"), "input": "again", "workspace": "/w",
        "labels": {"team": "x"}, "idempotency_key": "k-1", "status": cpb.RUN_STATUS_SUSPENDED,
        "phase": cpb.RUN_PHASE_EXECUTING_TOOLS,
        "turns": 4, "usage": cpb.Usage(input_tokens=10, output_tokens=2), "final_output": "nul \x00 here",
        "failure": cpb.FailureInfo(kind="timeout", retryable=True, message="slow"),
        "pending": [pb.PendingCall(call=call, reason="approve?")],
        "answers": Answers(decisions={"c1": pb.ApprovalDecision(call_id="c1", approved=True)}),
        "always_approved": ["read_file"], "pending_input": [{"id": "i1", "kind": "message", "text": "hi"}],
        "session_last_seq": 7, "consecutive_error_turns": 1, "tool_calls": 5, "cancel_requested": True,
        "cancel_reason": "enough", "lease_owner": "b", "lease_expires_s": 1234.5, "fencing_token": 1,
        "create_time_s": 1000.25, "event_seq_reserved": 64, "session_seq_reserved": 65,
        "deadline_s": 99999.125, "state": {"overflow_retries": 1, "attempts": {"c1": 2}},
    }  # fmt: skip
    assert set(changes) == set(COLUMNS) - {"run_id", "update_time_s"}
    assert await store.save("r1", changes=changes, log=[("all", {"n": 1})], token=1) is not None
    run = await store.get_run("r1")
    assert run is not None
    for name, value in changes.items():
        got = getattr(run, name)
        if name == "answers":
            assert got.to_bytes() == value.to_bytes()
        elif name == "final_output":
            assert got == "nul \ufffd here"  # stored alike on both backends
        else:
            assert got == value, name
    # a None clears a nullable column; the row's other values stay
    assert await store.save("r1", changes={"failure": None, "idempotency_key": None}, token=1) is not None
    again = await store.get_run("r1", "t")
    assert again is not None and again.failure is None and again.idempotency_key is None
    assert again.turns == 4 and again.agent.name == "b"
    assert await store.get_run("r1", "another-tenant") is None
    assert await store.pending_input("r1") == [{"id": "i1", "kind": "message", "text": "hi"}]
    assert await store.pending_input("no-such-run") == []


async def test_refused_saves_write_nothing(store: RunStore):
    await store.insert_run(_record("r2"), [])
    before = await store.get_run("r2")
    # a status the run is not in, a token that is not current
    assert await store.save("r2", changes={"turns": 9}, log=[("x", {})], expect_status=[2]) is None
    assert await store.save("r2", changes={"turns": 9}, events=[_event("r2", 1, 1)], token=5) is None
    assert await store.save("no-such-run", changes={"turns": 9}, log=[("x", {})]) is None
    after = await store.get_run("r2")
    assert after is not None and before is not None and after.turns == 0
    assert after.update_time_s == before.update_time_s
    assert [kind for _, kind, _ in await store.read_log("r2")] == ["started"]
    assert await store.read_events("r2", 0) == []
    # the guards that hold: the status and the token, together
    assert await store.save("r2", changes={"turns": 1}, log=[("y", {})], expect_status=[1], token=1) == []


async def test_the_log_continues_after_its_highest_seq_under_the_lease_in_force(store: RunStore):
    await store.insert_run(_record("r3"), [])
    # a's last save lets its lease lapse; b takes the run over
    await store.save("r3", changes={"lease_expires_s": 0.0}, log=[("a", {"i": 1}), ("b", {"i": 2})], token=1)
    token = await store.acquire_lease("r3", "b", 30)
    assert token == 2
    await store.save("r3", log=[("c", {"i": 3})], events=[_event("r3", 1, 1), _event("r3", 2, 2)], token=2)
    assert await store.read_log("r3") == [
        (1, "started", {"input": "go"}),
        (2, "a", {"i": 1}),
        (3, "b", {"i": 2}),
        (4, "c", {"i": 3}),
    ]
    assert [t[2:] for t in await store.log_leases("r3")] == [(1, "a"), (1, "a"), (1, "a"), (2, "b")]
    events = await store.read_events("r3", 0)
    assert [(e.seq, e.session_seq, e.event.diagnostic.message) for e in events] == [
        (1, 1, "event 1"),
        (2, 2, "event 2"),
    ]
    assert [e.seq for e in await store.read_events("r3", 1, 2)] == [2]


async def test_an_insert_numbers_its_events_after_the_sessions_head(store: RunStore):
    _, first = await store.insert_run(_record("r4", "shared"), [pb.RunEvent(), pb.RunEvent()])
    assert [(e.seq, e.session_seq, e.event.seq) for e in first] == [(1, 1, 1), (2, 2, 2)]
    # the run ends with a reservation past its stored events; the session's next run numbers after it
    await store.save("r4", changes={"status": cpb.RUN_STATUS_COMPLETED, "session_seq_reserved": 9}, token=1)
    _, second = await store.insert_run(_record("r5", "shared"), [pb.RunEvent(), pb.RunEvent(), pb.RunEvent()])
    assert [(e.seq, e.session_seq, e.event.seq) for e in second] == [(1, 10, 1), (2, 11, 2), (3, 12, 3)]
    stored = await store.read_events("r5", 0)
    assert [(e.seq, e.session_seq, e.session_id) for e in stored] == [(i, 9 + i, "shared") for i in (1, 2, 3)]
    assert await store.read_log("r5") == [(1, "started", {"input": "go"})]
    # a save that numbers its events itself continues both timelines
    got = await store.save("r5", new_events=[pb.RunEvent()], session=("t", "shared"), token=1)
    assert got is not None and [(e.seq, e.session_seq) for e in got] == [(4, 13)]


async def test_an_insert_that_conflicts_writes_nothing(store: RunStore):
    record, _ = await store.insert_run(_record("r6", "s6", key="key-1"), [pb.RunEvent()])
    # the idempotency key is taken: the existing run, nothing stored for the new id
    existing, stored = await store.insert_run(_record("r7", "s7", key="key-1"), [pb.RunEvent()])
    assert existing.run_id == "r6" and stored == []
    # the session has an unfinished run: refused, nothing stored for the new id
    with pytest.raises(SessionBusy) as busy:
        await store.insert_run(_record("r8", "s6"), [pb.RunEvent()])
    assert str(busy.value) == "r6"
    for run_id in ("r7", "r8"):
        assert await store.get_run(run_id) is None
        assert await store.read_log(run_id) == []
        assert await store.read_events(run_id, 0) == []
    assert record.run_id == "r6"


async def test_a_replay_longer_than_the_inline_bound_is_read_whole(store: RunStore):
    await store.insert_run(_record("r9"), [])
    n = INLINE_ROWS + 44
    events = [_event("r9", seq, seq) for seq in range(1, n + 1)]
    log = [("step", {"i": i}) for i in range(n)]
    assert await store.save("r9", log=log, events=events, token=1) == []
    read = await store.read_events("r9", 0)
    assert [e.seq for e in read] == list(range(1, n + 1))
    assert [e.seq for e in await store.read_events("r9", 10, 20)] == list(range(11, 21))
    entries = await store.read_log("r9")
    assert [seq for seq, _, _ in entries] == list(range(1, n + 2))
    assert entries[-1] == (n + 1, "step", {"i": n - 1})


def test_the_save_functions_name_every_column_of_the_runs_table():
    """runs_save / runs_insert list the table's columns (migration 0004): a new column, a new revision."""
    migration = importlib.import_module("agentrt.runs.storage.migrations.versions.0004_save_functions")
    assert migration.COLUMNS == tuple(c.name for c in RunRow.__table__.columns) == store_lite.RUN_COLUMNS


def test_a_lock_held_elsewhere_leaves_the_driver_as_the_error_mesh_db_falls_back_on(tmp_path):
    """A driver-level statement that meets a lock raises SQLAlchemy's OperationalError, `lock_taken`."""
    path = str(tmp_path / "locked.db")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, pending_input_json TEXT)")
    holder.execute("BEGIN EXCLUSIVE")  # a rollback journal: no reader gets in
    reader = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        with pytest.raises(OperationalError) as err:
            store_lite._run(reader.cursor(), "SELECT pending_input_json FROM runs WHERE run_id = ?", ("r",))
        assert lock_taken(err.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        reader.close()


@pytest.mark.postgres
async def test_saves_with_events_notify_other_replicas_at_commit():
    """One NOTIFY per save point or insert that stores events (decision 0011), none otherwise."""
    import asyncio
    import json

    import asyncpg

    await require_pg()
    url = await fresh_pg_database(pg_server(), "runs_notify_paths")
    db = Database(url)
    store = RunStore(db, replica="replica-a")
    await store.create_tables()
    notes: asyncio.Queue[dict] = asyncio.Queue()
    listener = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await listener.add_listener("agentrt_run_events", lambda *a: notes.put_nowait(json.loads(a[3])))
        await store.insert_run(_record("n1"), [pb.RunEvent(), pb.RunEvent()])
        note = await asyncio.wait_for(notes.get(), 10)
        assert note == {"replica": "replica-a", "run_id": "n1", "tenant": "t", "session_id": "s-n1", "seq": 2}
        await store.save("n1", changes={"turns": 1}, log=[("x", {})], token=1)  # no events: no NOTIFY
        await store.save("n1", events=[_event("n1", 3, 3), _event("n1", 4, 4)], token=1)
        note = await asyncio.wait_for(notes.get(), 10)
        assert note == {"replica": "replica-a", "run_id": "n1", "tenant": "t", "session_id": "s-n1", "seq": 4}
        assert await store.save("n1", events=[_event("n1", 5, 5)], token=9) is None  # refused: nothing sent
        await store.insert_run(_record("n2"), [])  # no events: no NOTIFY
        await store.save("n1", events=[_event("n1", 6, 6)], token=1)
        note = await asyncio.wait_for(notes.get(), 10)
        assert note["seq"] == 6 and notes.empty()
    finally:
        await listener.close()
        await db.close()


async def test_input_pushed_concurrently_is_all_queued_once(store: RunStore):
    # InjectInput from many clients at once, and a save point consuming the queue meanwhile:
    # every push lands exactly once (none lost to another's write, none brought back after
    # the save consumed it). On PostgreSQL the push reads the queue under the row's lock.
    import asyncio

    await store.insert_run(_record("q1"), [])
    first = await store.push_input("q1", {"id": "first", "kind": "steer", "text": "0"})
    assert first == 1
    items = [{"id": f"i{n}", "kind": "steer", "text": str(n)} for n in range(20)]

    async def consume_first() -> None:
        assert await store.save("q1", changes={}, token=1, drop_inputs=["first"]) is not None

    positions = await asyncio.gather(consume_first(), *(store.push_input("q1", item) for item in items))
    queued = await store.pending_input("q1")
    assert sorted(i["id"] for i in queued) == sorted(i["id"] for i in items)
    assert all(isinstance(p, int) and p >= 1 for p in positions[1:])


async def test_concurrent_registrations_of_one_name_get_successive_versions(store: RunStore):
    # Ten RegisterAgent calls for one name at once: each gets its own version, 1..10 (on
    # PostgreSQL all but one failed on the version's key before the name's lock).
    import asyncio

    specs = await asyncio.gather(
        *(store.register_agent("t", pb.AgentSpec(name="shared", instructions=str(n))) for n in range(10))
    )
    assert sorted(s.version for s in specs) == list(range(1, 11))
    latest = await store.get_agent("t", "shared")
    assert latest is not None and latest.version == 10
