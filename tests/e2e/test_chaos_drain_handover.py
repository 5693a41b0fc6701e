"""A draining runs replica hands its runs over, also when a model call outlasts the drain.

docs/operations.md ("Draining"): runs in flight on a draining runs replica stop at their next
wait (a model call in flight finishes first and is logged), their leases are released, and
another replica continues them without waiting for the lease to expire. Real processes on
PostgreSQL (the shared chaos mesh): replica "s1" is `agentrt serve runs` with a drain and a
lease of the test's choosing, the mesh's own replica "a" (lease chaos_helpers.LEASE_SECONDS)
is the one that continues; the provider emulator streams turn 1's answer slowly.

- The call outlasts the drain (`test_a_model_call_longer_than_the_drain_...`): the drain ends
  with the call still in flight, so s1 cuts it (the gateway's journal keeps it going) and must
  still release the lease: "a" takes the run over before s1's lease would have expired and
  its repeat of the call is answered by the journal, not asked again.
- The drain outlasts the lease (`test_a_drain_longer_than_the_lease_...`): s1 keeps renewing
  its leases while it drains, so nobody takes the run over while s1 still waits on the call;
  the call finishes and s1 logs it, then hands the run over at its next wait (the command),
  though a client still watches the run on s1 (the RPCs' grace): the runs stop as the drain
  begins, not once the RPCs drained.

Every test checks the crash tests' guarantees too: the provider asked once per turn, the
command run once, the session without duplicates, one event timeline, the run completed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import grpc
import pytest
from chaos_helpers import (
    LEASE_SECONDS,
    ChaosMesh,
    Follower,
    Replica,
    check_session,
    new_port,
    session_entries,
)
from shared_meshes import reset_chaos

from agentrt.mesh.storage.db import Database
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CELL = "cell:drain"
#: Turn 1's text, streamed 2 characters per event 0.05 s apart: about 8 s of model call.
SLOW_TEXT = "x" * 320
FINAL = "after the drain"


def _responder(path: str, body: object) -> Reply | None:
    text = json.dumps(body)
    if CELL not in text:
        return None
    if "function_call_output" in text:  # turn 2: the command's result is in the request
        return Reply(text=FINAL)
    cmd = json.dumps({"cmd": "echo ran >> ran.txt; echo ok"})
    return Reply(
        text=SLOW_TEXT, tool_calls=[ToolCallReply("exec_command", cmd)], chunk_chars=2, event_delay=0.05
    )


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    return reset_chaos(shared_chaos, _responder)  # the session's chaos mesh (conftest.py), reset


async def _row(db: Database, run_id: str) -> tuple[str, float, int]:
    """The run's (lease owner, lease expiry in epoch seconds, fencing token), as stored."""
    from sqlalchemy import text

    async with db.read() as conn:
        row = (
            await conn.execute(
                text("SELECT lease_owner, lease_expires_s, fencing_token FROM runs WHERE run_id = :r"),
                {"r": run_id},
            )
        ).one()
        return str(row[0] or ""), float(row[1]), int(row[2])


async def _log(db: Database, run_id: str) -> list[tuple[str, dict, str, int]]:
    """The run log in order: (kind, payload, lease owner and fencing token of its writer)."""
    from sqlalchemy import text

    async with db.read() as conn:
        rows = await conn.execute(
            text(
                "SELECT kind, payload, lease_owner, fencing_token FROM run_log WHERE run_id = :r ORDER BY seq"
            ),
            {"r": run_id},
        )
        return [(str(k), json.loads(p), str(o), int(t)) for k, p, o, t in rows.all()]


async def _first_other_owner(db: Database, run_id: str, draining: str) -> tuple[str, float, int]:
    """Poll the run's row until a replica other than `draining` holds its lease; return the row."""
    while True:
        owner, expires, token = await _row(db, run_id)
        if owner not in ("", draining):
            return owner, expires, token
        await asyncio.sleep(0.02)


async def _watch_until_the_call(follower: Follower, address: str) -> asyncio.Task[object]:
    """Follow the run on address in a task of its own; return it once turn 1's call streams.

    The stream stays open (a client watching the run on that replica) until it ends or breaks.
    """
    watching = asyncio.create_task(follower.follow(address))

    async def streaming() -> None:
        while not any(e.WhichOneof("payload") == "model_delta" for e in follower.order):
            assert not watching.done(), "the stream ended before turn 1's call streamed"
            await asyncio.sleep(0.02)

    await asyncio.wait_for(streaming(), 60)
    return watching


async def _start(address: str, workspace: Path) -> pb.StartRunResponse:
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command")],
        limits=pb.AgentLimits(max_turns=4),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        return await pb_grpc.RunServiceStub(channel).StartRun(
            pb.StartRunRequest(agent=agent, input=f"do {CELL}", workspace=str(workspace))
        )


async def _end(chaos: ChaosMesh, started: pb.StartRunResponse, follower: Follower, workspace: Path) -> None:
    """The run completed once on the mesh: the crash tests' guarantees (module docstring)."""
    a = chaos.replicas["a"]
    await follower.to_the_end([a.address])
    async with grpc.aio.insecure_channel(a.address) as channel:
        run = (await pb_grpc.RunServiceStub(channel).GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == FINAL
    bodies = [json.dumps(b) for _, b in chaos.emu.requests]
    asked = ["function_call_output" in b for b in bodies if CELL in b]
    assert asked == [False, True], f"the provider was asked {asked} (False: turn 1, True: turn 2)"
    assert (workspace / "ran.txt").read_text() == "ran\n"  # the command ran once
    check_session(await session_entries(chaos.sessions, started.session_id))
    called = [e.tool_called.call.call_id for e in follower.order if e.WhichOneof("payload") == "tool_called"]
    assert len(called) == 1, called


def _spawn_draining(chaos: ChaosMesh, lease_s: float, drain_s: float) -> Replica:
    return chaos.spawn(
        "runs",
        "s1",
        new_port(),
        {
            "AGENTRT_RUNS_REPLICA_ID": "s1",
            "AGENTRT_RUNS_LEASE_SECONDS": str(lease_s),
            "AGENTRT_DRAIN_SECONDS": str(drain_s),
        },
    )


async def test_a_model_call_longer_than_the_drain_still_hands_the_run_over_before_the_lease_expires(
    chaos: ChaosMesh, tmp_path: Path
):
    """s1 drains for 1 s while turn 1's call has about 8 s to go; its lease is 12 s."""
    lease_s = 12.0
    s1 = _spawn_draining(chaos, lease_s, drain_s=1.0)
    runs_db = Database(chaos.env["AGENTRT_RUNS_DB"])
    workspace = tmp_path / "ws"
    taken: asyncio.Task[tuple[str, float, int]] | None = None
    watching: asyncio.Task[object] | None = None
    try:
        started = await _start(s1.address, workspace)
        follower = Follower(started.run_id)
        watching = await _watch_until_the_call(follower, s1.address)
        owner, held_until, token = await _row(runs_db, started.run_id)
        assert owner == "s1"
        taken = asyncio.create_task(_first_other_owner(runs_db, started.run_id, "s1"))
        os.kill(s1.pid, signal.SIGTERM)
        await watching  # a watcher of the draining replica: its stream ends with the drain
        assert s1.proc is not None
        assert await asyncio.to_thread(s1.proc.wait, 60) == 0  # a clean drain
        at_exit = await _row(runs_db, started.run_id)
        # The drain released the lease, or another replica already holds it: s1 did not exit
        # holding a live lease that every other replica would have to wait out.
        assert at_exit[0] != "s1", f"s1 exited holding the run's lease (row {at_exit})"
        b_owner, b_expires, b_token = await asyncio.wait_for(taken, 60)
        # The new owner's lease was granted (its expiry minus its lease) before the lease s1
        # held when the drain began would have expired: a takeover of a released lease.
        granted = b_expires - LEASE_SECONDS
        assert b_owner == "a" and b_token > token
        assert granted < held_until, f"taken over {granted - held_until:.2f} s after s1's lease expired"
        print(f"taken over {held_until - granted:.2f} s before s1's lease would have expired")
        await _end(chaos, started, follower, workspace)
        log = await _log(runs_db, started.run_id)
        responded = [(o, t) for kind, p, o, t in log if kind == "model_responded" and p["turn"] == 1]
        assert responded == [("a", b_token)]  # s1 cut its call; "a" logged the journal's answer
        assert all(o != "s1" or t == token for _, _, o, t in log)  # s1 wrote with its token only
    finally:
        for task in (taken, watching):
            if task is not None:
                task.cancel()
        chaos.replicas.pop(s1.name, None)
        await runs_db.close()


async def test_a_drain_longer_than_the_lease_keeps_the_lease_until_the_call_is_logged(
    chaos: ChaosMesh, tmp_path: Path
):
    """s1's lease is 3 s and its drain 30 s; turn 1's call has about 8 s to go at SIGTERM."""
    s1 = _spawn_draining(chaos, lease_s=3.0, drain_s=30.0)
    runs_db = Database(chaos.env["AGENTRT_RUNS_DB"])
    workspace = tmp_path / "ws"
    watching: asyncio.Task[object] | None = None
    try:
        started = await _start(s1.address, workspace)
        follower = Follower(started.run_id)
        watching = await _watch_until_the_call(follower, s1.address)
        token = (await _row(runs_db, started.run_id))[2]
        os.kill(s1.pid, signal.SIGTERM)
        # A watcher of the draining replica keeps its stream (in the RPCs' grace) until the
        # run ends, which "a" sees to: s1's runs stop as the drain begins, not after that grace.
        await watching
        assert s1.proc is not None
        assert await asyncio.to_thread(s1.proc.wait, 60) == 0  # a clean drain
        await _end(chaos, started, follower, workspace)
        log = await _log(runs_db, started.run_id)
        # s1 held its lease through the drain: its call finished and s1 logged the answer
        # (with the turn's tools_started), then stopped at its next wait (the command) and
        # handed over; "a" continued from the log with a newer token: turn 2 is its.
        responded = [(o, t) for kind, p, o, t in log if kind == "model_responded" and p["turn"] == 1]
        assert responded == [("s1", token)], log
        after = [(o, t) for kind, p, o, t in log if kind == "model_responded" and p["turn"] == 2]
        assert len(after) == 1 and after[0][0] == "a" and after[0][1] > token, log
    finally:
        if watching is not None:
            watching.cancel()
        chaos.replicas.pop(s1.name, None)
        await runs_db.close()
