"""A tool turn's batch reads the run's input queue only when input may have arrived (decision 0060).

On PostgreSQL the queue read before each batch was one round trip per turn. The loop now keeps
the queue it read (less what its save points consumed) while its process's InputWatch has
heard of no push since: its own replica's InjectInput directly, another replica's through the
NOTIFY each push sends at its commit. These tests count the reads, and check that input
injected on either replica, or after the LISTEN connection was lost and re-opened, still
reaches the batch of the turn it arrived in. `TRUST_S` is raised so that only a notification
can make the loop read again (a slow machine must not pass these by reading anyway).
"""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from agentrt.runs.events.notify import libpq_dsn
from agentrt.runs.storage import input_watch
from agentrt.runs.storage.input_watch import InputWatch
from agentrt.runs.storage.store import INPUT_CHANNEL
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import PG_ENV, WAIT_S, agent, start_mesh, start_replica


def _store(server: object):
    return server.manager.deps.store  # type: ignore[attr-defined]


def _count_reads(store, monkeypatch) -> list[str]:
    reads: list[str] = []
    read = store.pending_input

    async def counted(run_id: str):
        reads.append(run_id)
        return await read(run_id)

    monkeypatch.setattr(store, "pending_input", counted)
    return reads


def _tool_turns(n: int, *, slow_turn: int | None = None) -> list[Reply]:
    """n list_files turns then an answer; turn `slow_turn` (1-based) streams for about 0.6 s."""
    replies = []
    for i in range(1, n + 1):
        slow = {"text": "x" * 60, "chunk_chars": 1, "event_delay": 0.01} if i == slow_turn else {}
        replies.append(Reply(tool_calls=[ToolCallReply("list_files", "{}")], **slow))
    return [*replies, Reply(text="done")]


def _user_texts(entries) -> list[str]:
    return [
        e.item.message.content[0].text.text
        for e in entries
        if e.item.HasField("message") and e.item.message.role == cpb.ROLE_USER
    ]


@pytest.fixture
def trust_long(monkeypatch):
    monkeypatch.setattr(input_watch, "TRUST_S", 60.0)


@pytest.mark.postgres
async def test_batches_read_the_queue_once_while_no_input_arrives(
    start_server, tmp_path, emulator, monkeypatch, trust_long
):
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True)
    reads = _count_reads(_store(mesh.runs_server), monkeypatch)
    mesh.emu.script(_tool_turns(5))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.turns == 6
    # six batches (five tool turns and the answer): one read at the first, one at the run's end
    assert reads == [started.run_id, started.run_id]


async def test_on_sqlite_every_batch_reads_the_queue(
    start_server, tmp_path, emulator, monkeypatch, trust_long
):
    monkeypatch.delenv(PG_ENV, raising=False)  # CI runs this directory's meshes on PostgreSQL too
    mesh = await start_mesh(start_server, tmp_path, emulator)
    assert _store(mesh.runs_server).db.is_sqlite
    reads = _count_reads(_store(mesh.runs_server), monkeypatch)
    mesh.emu.script(_tool_turns(3))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    # no LISTEN on SQLite (another process may share the file): four batches and the end
    assert len(reads) == 5


async def _inject_during_turn_two(mesh, stub, started) -> None:
    """Wait for turn 2's model call to be under way, then inject through `stub`."""

    async def turn_two_asked() -> None:
        while len(mesh.emu.requests) < 2:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(turn_two_asked(), WAIT_S)
    await stub.InjectInput(
        pb.InjectInputRequest(run_id=started.run_id, text="also count them", kind=pb.INJECTION_KIND_NEXT_TURN)
    )


async def _injected_in_turn_two(mesh, started) -> None:
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.turns == 4
    assert _user_texts(await mesh.entries(started.session_id)) == ["go", "also count them"]
    # the input rode on turn 2's batch, so turn 3's request (the third) carries it, turn 2's does not
    bodies = [json.dumps(body) for _, body in mesh.emu.requests]
    assert "also count them" not in bodies[1] and "also count them" in bodies[2]


@pytest.mark.postgres
async def test_input_injected_on_another_replica_reaches_the_batch_of_its_turn(
    start_server, tmp_path, emulator, monkeypatch, trust_long
):
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True, replica_id="a")
    _, stub_b = await start_replica(mesh, start_server, replica_id="b", lease_seconds=30.0)
    reads = _count_reads(_store(mesh.runs_server), monkeypatch)
    mesh.emu.script(_tool_turns(3, slow_turn=2))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await _inject_during_turn_two(mesh, stub_b, started)
    await _injected_in_turn_two(mesh, started)
    # the first batch, the second (B's notification reached A), the run's end
    assert len(reads) == 3


@pytest.mark.postgres
async def test_input_injected_on_the_same_replica_reaches_the_batch_of_its_turn(
    start_server, tmp_path, emulator, trust_long
):
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True)
    # Its own pushes are noted in-process at their commit, not only by their notification:
    # with the LISTEN on the input channel gone, the input still reaches its turn's batch.
    listener = mesh.runs_server.listener  # type: ignore[attr-defined]
    await listener._conn.remove_listener(INPUT_CHANNEL, listener._on_input)
    mesh.emu.script(_tool_turns(3, slow_turn=2))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await _inject_during_turn_two(mesh, mesh.runs, started)
    await _injected_in_turn_two(mesh, started)


@pytest.mark.postgres
async def test_after_the_listen_connection_comes_back_pushes_are_heard_again(
    start_server, tmp_path, emulator, trust_long
):
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True, replica_id="a")
    _, stub_b = await start_replica(mesh, start_server, replica_id="b", lease_seconds=30.0)
    listener = mesh.runs_server.listener  # type: ignore[attr-defined]
    watch = _store(mesh.runs_server).input_watch
    admin = await asyncpg.connect(libpq_dsn(mesh.runs_server.config.db_url))  # type: ignore[attr-defined]
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", listener._conn.get_server_pid())
    finally:
        await admin.close()

    async def heard_again() -> None:
        while not (listener.listening and watch.listening):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(heard_again(), WAIT_S)
    mesh.emu.script(_tool_turns(3, slow_turn=2))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await _inject_during_turn_two(mesh, stub_b, started)
    await _injected_in_turn_two(mesh, started)


def test_the_watch_trusts_a_mark_only_while_nothing_can_have_been_missed():
    now = [100.0]
    watch = InputWatch(clock=lambda: now[0])
    watch.track("r")
    untracked = watch.mark("other")
    mark = watch.mark("r")
    assert not watch.unchanged("r", mark)  # not listening yet (SQLite, or before LISTEN)
    watch.heard_again()
    assert not watch.unchanged("r", mark)  # a mark from before the LISTEN was in place
    mark = watch.mark("r")
    assert watch.unchanged("r", mark)
    assert not watch.unchanged("other", untracked)  # no executor here: nothing is counted
    watch.pushed("other")  # another run's push changes nothing for r
    assert watch.unchanged("r", mark)
    now[0] += input_watch.TRUST_S + 0.001
    assert not watch.unchanged("r", mark)  # too old: a lost notification is bounded
    mark = watch.mark("r")
    watch.pushed("r")
    assert not watch.unchanged("r", mark)
    mark = watch.mark("r")
    watch.lost()
    assert not watch.unchanged("r", mark)
    watch.heard_again()
    assert not watch.unchanged("r", mark)  # pushes during the outage may have been missed
    mark = watch.mark("r")
    watch.untrack("r")
    assert not watch.unchanged("r", mark)
