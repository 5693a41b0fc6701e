"""A runs replica drained with SIGTERM in the middle of traffic: bursts, approvals, SIGTERM twice, kill -9.

Real processes on PostgreSQL (the shared chaos mesh): replica "s1" (`agentrt serve runs` with a
lease of 4 or 3 s and a drain of the test's choosing) takes the traffic, the mesh's replica "a"
continues. A client that StartRuns or ResumeRuns retries a refused request on "a" (StartRun
with its `idempotency_key`). Every cell must complete once: the provider asked once per turn,
the command run once, the session without duplicates; and a replica that exited 0 must hold
no live lease (decisions 0054, 0055).

- A burst of 24 StartRuns at once, SIGTERM once the first is answered, a drain of 0.3 s, a
  watcher of each run on s1. Before decision 0055 s1 exited 0 with 1 to 8 runs still under
  its live lease and no executor (StartRuns cancelled by the RPCs' grace after their insert,
  hand-overs cut by the drain's deadline), left until the lease expired.
- Six runs suspended for approval, approvals racing the SIGTERM.
- SIGTERM twice, then kill -9 mid-drain: the run is left to its lease and continued once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import grpc
import pytest
from chaos_helpers import ChaosMesh, Follower, Replica, check_session, new_port, session_entries
from shared_meshes import reset_chaos

from agentrt.mesh.storage.db import Database
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

PREFIX = "dburst:"


def _cell_of(text: str) -> str | None:
    at = text.find(PREFIX)
    if at < 0:
        return None
    end = at + len(PREFIX)
    while end < len(text) and (text[end].isalnum() or text[end] == "-"):
        end += 1
    return text[at:end]


def _responder(path: str, body: object) -> Reply | None:
    """Turn 1: about 1 s of streamed text and a command; turn 2: the cell's final answer."""
    text = json.dumps(body)
    cell = _cell_of(text)
    if cell is None:
        return None
    if "function_call_output" in text:
        return Reply(text=f"finished {cell}")
    cmd = json.dumps({"cmd": f"echo {cell} >> ran.txt; echo ok"})
    return Reply(
        text="x" * 40, tool_calls=[ToolCallReply("exec_command", cmd)], chunk_chars=2, event_delay=0.05
    )


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    return reset_chaos(shared_chaos, _responder)


def _spawn(chaos: ChaosMesh, lease_s: float, drain_s: float) -> Replica:
    env = {
        "AGENTRT_RUNS_REPLICA_ID": "s1",
        "AGENTRT_RUNS_LEASE_SECONDS": str(lease_s),
        "AGENTRT_DRAIN_SECONDS": str(drain_s),
    }
    return chaos.spawn("runs", "s1", new_port(), env)


async def _start(
    addresses: list[str], cell: str, workspace: Path, approval: bool = False
) -> pb.StartRunResponse:
    """StartRun with an idempotency key, tried on each address in turn until one answers."""
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command", needs_approval=True if approval else None)],
        limits=pb.AgentLimits(max_turns=4),
    )
    key = cell.replace(":", "-")
    req = pb.StartRunRequest(agent=agent, input=f"do {cell}", workspace=str(workspace), idempotency_key=key)
    errors = []
    for address in addresses:
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                return await pb_grpc.RunServiceStub(channel).StartRun(req, timeout=60)
        except grpc.aio.AioRpcError as err:
            errors.append(f"{address}: {err.code().name} {err.details()}")
    raise AssertionError(f"no replica started {cell}: {errors}")


async def _get(address: str, run_id: str) -> pb.Run:
    async with grpc.aio.insecure_channel(address) as channel:
        return (await pb_grpc.RunServiceStub(channel).GetRun(pb.GetRunRequest(run_id=run_id))).run


async def _live_leases(chaos: ChaosMesh, owner: str) -> list[tuple[str, float]]:
    """Runs whose lease `owner` holds and that has not expired: (run id, seconds left)."""
    from sqlalchemy import text

    db = Database(chaos.env["AGENTRT_RUNS_DB"])
    try:
        async with db.read() as conn:
            rows = await conn.execute(
                text("SELECT run_id, lease_expires_s FROM runs WHERE lease_owner = :o"), {"o": owner}
            )
            now = time.time()
            return [(str(r), float(e) - now) for r, e in rows.all() if float(e or 0) > now]
    finally:
        await db.close()


async def _completed_once(chaos: ChaosMesh, cell: str, started: pb.StartRunResponse, workspace: Path) -> None:
    a = chaos.replicas["a"]
    await Follower(started.run_id).to_the_end([a.address])
    run = await _get(a.address, started.run_id)
    assert run.status == cpb.RUN_STATUS_COMPLETED, (cell, run.status, run.failure)
    assert run.final_output == f"finished {cell}"
    bodies = [json.dumps(b) for _, b in chaos.emu.requests]
    asked = ["function_call_output" in b for b in bodies if _cell_of(b) == cell]
    assert asked == [False, True], f"{cell}: the provider was asked {asked} (False: turn 1, True: turn 2)"
    assert (workspace / "ran.txt").read_text() == f"{cell}\n", cell  # the command ran once
    check_session(await session_entries(chaos.sessions, started.session_id))


async def test_sigterm_during_a_burst_of_starts_leaves_no_lease_and_every_run_completes_once(
    chaos: ChaosMesh, tmp_path: Path
):
    s1 = _spawn(chaos, lease_s=4.0, drain_s=0.3)
    a = chaos.replicas["a"]
    cells = [f"{PREFIX}burst-{i}" for i in range(24)]
    spaces = {c: tmp_path / c.replace(":", "-") for c in cells}
    started: dict[str, pb.StartRunResponse] = {}
    watchers: list[asyncio.Task[object]] = []

    async def one(cell: str) -> None:
        started[cell] = await _start([s1.address, a.address], cell, spaces[cell])
        watchers.append(asyncio.create_task(Follower(started[cell].run_id).follow(s1.address)))

    burst = asyncio.gather(*(one(c) for c in cells))
    try:
        while not started:
            await asyncio.sleep(0.01)
        os.kill(s1.pid, signal.SIGTERM)
        await asyncio.wait_for(burst, 60)
        assert s1.proc is not None
        assert await asyncio.to_thread(s1.proc.wait, 60) == 0  # a clean drain
        assert await _live_leases(chaos, "s1") == []  # exited cleanly: no live lease left behind
        await asyncio.wait_for(asyncio.gather(*watchers, return_exceptions=True), 60)
        for cell in cells:
            await _completed_once(chaos, cell, started[cell], spaces[cell])
    finally:
        burst.cancel()
        for w in watchers:
            w.cancel()
        chaos.replicas.pop("s1", None)


async def test_sigterm_while_approvals_race_it_loses_no_run(chaos: ChaosMesh, tmp_path: Path):
    s1 = _spawn(chaos, lease_s=4.0, drain_s=2.0)
    a = chaos.replicas["a"]
    cells = [f"{PREFIX}approval-{i}" for i in range(6)]
    spaces = {c: tmp_path / c.replace(":", "-") for c in cells}
    started = {c: await _start([s1.address], c, spaces[c], approval=True) for c in cells}
    for resp in started.values():
        await Follower(resp.run_id).follow(s1.address, until="run_suspended")
    pending = {
        c: (await _get(s1.address, r.run_id)).pending_calls[0].call.call_id for c, r in started.items()
    }

    async def approve(cell: str, delay: float) -> None:
        await asyncio.sleep(delay)
        decision = pb.ApprovalDecision(call_id=pending[cell], approved=True)
        req = pb.ResumeRunRequest(run_id=started[cell].run_id, decisions=[decision])
        for address in (s1.address, a.address):
            try:
                async with grpc.aio.insecure_channel(address) as channel:
                    await pb_grpc.RunServiceStub(channel).ResumeRun(req, timeout=60)
                return
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    return  # not suspended any more: the refused-looking try had landed

    try:
        approvals = asyncio.gather(*(approve(c, 0.02 * i) for i, c in enumerate(cells)))
        await asyncio.sleep(0.05)
        os.kill(s1.pid, signal.SIGTERM)
        await asyncio.wait_for(approvals, 60)
        assert s1.proc is not None
        assert await asyncio.to_thread(s1.proc.wait, 60) == 0
        assert await _live_leases(chaos, "s1") == []
        for cell in cells:
            await _completed_once(chaos, cell, started[cell], spaces[cell])
    finally:
        chaos.replicas.pop("s1", None)


async def test_sigterm_twice_keeps_draining_and_kill_9_mid_drain_loses_nothing(
    chaos: ChaosMesh, tmp_path: Path
):
    """A 30 s drain, a 3 s lease, turn 1's call streaming: SIGTERM, SIGTERM, then kill -9."""
    s1 = _spawn(chaos, lease_s=3.0, drain_s=30.0)
    cell, workspace = f"{PREFIX}twice", tmp_path / "ws"
    try:
        started = await _start([s1.address], cell, workspace)
        await Follower(started.run_id).follow(s1.address, until="model_delta")
        os.kill(s1.pid, signal.SIGTERM)
        os.kill(s1.pid, signal.SIGTERM)
        assert s1.proc is not None
        if s1.proc.poll() is None:
            chaos.kill(s1)  # kill -9 mid-drain: what it did not hand over is left to its lease
        assert s1.proc.returncode in (0, -9), s1.proc.returncode
        await _completed_once(chaos, cell, started, workspace)
    finally:
        chaos.replicas.pop("s1", None)
