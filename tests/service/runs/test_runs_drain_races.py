"""Drain races: a start cancelled once recorded, and a hand-over cut by the drain's deadline.

Both left a run RUNNING with a live lease no executor held, found by the breaker's e2e burst
(a SIGTERM during 24 concurrent StartRuns on PostgreSQL, a 0.3 s drain: 1 to 8 such runs
each time, the drained replica exiting 0). Decision 0054 promises a cleanly stopped replica
leaves no live lease behind.

A StartRun cancelled once its run is recorded: the run still gets its executor.

The run row is written RUNNING with this replica's lease; only the executor renews and
releases that lease. A StartRun whose handler was cancelled right after the insert (its
caller went away, or the drain's RPC grace ended: "Cancelling all calls") used to skip the
spawn: the run sat with a live lease nobody drove, until the lease expired (30 s by
default), and a draining replica exited 0 still holding it. Here the insert is held so the
cancel lands there every time, on the real servers over grpc.aio (SQLite).

A run already handing over (stopped at its next wait, writing its events and releasing its
lease) when the drain's deadline cancels the late executors: the cancel cut the hand-over,
so the lease stayed held. Here the release is held until the executor has been cancelled.
"""

from __future__ import annotations

import asyncio

import pytest

from agentrt.runs.manager import RunManager
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent, start_mesh


class HeldInsert:
    """Holds every run insert, once written, until `release`; records the StartRun handler's cancel."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inserted, self.cancelled, self.released = asyncio.Event(), asyncio.Event(), asyncio.Event()
        real_insert, real_start = RunStore.insert_run, RunManager.start_run
        held = self

        async def insert_run(store: RunStore, record, events):
            stored = await real_insert(store, record, events)  # committed
            held.inserted.set()
            await held.released.wait()
            return stored

        async def start_run(manager: RunManager, tenant: str, req: pb.StartRunRequest):
            try:
                return await real_start(manager, tenant, req)
            except asyncio.CancelledError:
                held.cancelled.set()
                raise

        monkeypatch.setattr(RunStore, "insert_run", insert_run)
        monkeypatch.setattr(RunManager, "start_run", start_run)


async def _run_ids(manager: RunManager) -> list[str]:
    return [r.run_id for r in await manager.store.list_runs("default", "", 10)]


async def test_a_start_whose_caller_went_away_after_the_insert_still_runs(
    start_server, tmp_path, emulator, monkeypatch
):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=600, replica_id="replica-a")
    emulator.script([Reply(text="done")])
    held = HeldInsert(monkeypatch)
    call = mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await asyncio.wait_for(held.inserted.wait(), WAIT_S)
    call.cancel()  # the caller goes away once the run is recorded
    await asyncio.wait_for(held.cancelled.wait(), WAIT_S)
    held.released.set()
    manager = mesh.runs_server.manager
    [run_id] = await _run_ids(manager)

    async def ended() -> bool:
        record = await manager.store.get_run(run_id)
        return record is not None and record.finished

    loop = asyncio.get_running_loop()
    end = loop.time() + WAIT_S
    while not await ended():
        assert loop.time() < end, "the recorded run never ran (its lease held, no executor)"
        await asyncio.sleep(0.02)
    record = await manager.store.get_run(run_id)
    assert record is not None and record.status == cpb.RUN_STATUS_COMPLETED and record.final_output == "done"


async def test_a_drain_that_cancels_a_recorded_start_still_releases_its_lease(
    start_server, tmp_path, emulator, monkeypatch
):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=600, replica_id="replica-a")
    held = HeldInsert(monkeypatch)
    call = mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await asyncio.wait_for(held.inserted.wait(), WAIT_S)
    stopping = asyncio.create_task(mesh.runs_server.stop(grace=0))  # SIGTERM's drain, no RPC grace
    await asyncio.wait_for(held.cancelled.wait(), WAIT_S)
    held.released.set()
    await asyncio.wait_for(stopping, WAIT_S)
    call.cancel()
    manager = mesh.runs_server.manager
    [run_id] = await _run_ids(manager)
    record = await manager.store.get_run(run_id)
    assert record is not None and record.status == cpb.RUN_STATUS_RUNNING
    # The replica stopped cleanly: the run's lease is released for the next replica, not held.
    assert (record.lease_owner, record.lease_expires_s) == ("", 0.0)


async def test_a_hand_over_under_way_at_the_drains_deadline_still_releases_the_lease(
    start_server, tmp_path, emulator, monkeypatch
):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=600, replica_id="replica-a")
    command = ToolCallReply("exec_command", '{"cmd": "echo ran"}')
    emulator.responder = lambda path, body: Reply(
        text="x" * 20, tool_calls=[command], chunk_chars=2, event_delay=0.03
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await mesh.events(started.run_id, until="model_delta")
    manager = mesh.runs_server.manager
    executor_task = manager._executors[started.run_id][1]
    real_release = RunStore.release_lease
    cut: list[bool] = []

    async def release_lease(store, run_id: str, token: int):
        # The hand-over's last write, held until the drain's deadline has cancelled the executor.
        loop = asyncio.get_running_loop()
        end = loop.time() + WAIT_S
        while not executor_task.cancelling() and loop.time() < end:
            await asyncio.sleep(0.01)
        cut.append(bool(executor_task.cancelling()))
        return await real_release(store, run_id, token)

    monkeypatch.setattr(RunStore, "release_lease", release_lease)
    # A drain of 1 s: the model call (0.3 s of stream) ends within it, the run stops at its
    # next wait (the command) and hands over; its release is held past the deadline, whose cancel comes then.
    await manager.stop(1.0)
    record = await manager.store.get_run(started.run_id)
    assert record is not None and record.status == cpb.RUN_STATUS_RUNNING
    assert (record.lease_owner, record.lease_expires_s) == ("", 0.0)  # released, not left held
    assert cut == [True]  # the hand-over was under way when the deadline's cancel came


async def test_a_resume_whose_caller_went_away_after_the_claim_still_runs(
    start_server, tmp_path, emulator, monkeypatch
):
    """ResumeRun's claim (the lease) held, the RPC cancelled meanwhile: the run still continues."""
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=600, replica_id="replica-a")
    emulator.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo x"}')]), Reply(text="finished")]
    )
    gated = agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=gated, input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    claimed, cancelled, released = asyncio.Event(), asyncio.Event(), asyncio.Event()
    real_acquire, real_resume = RunStore.acquire_lease, RunManager.resume

    async def acquire_lease(store, run_id: str, owner: str, lease_s: float):
        token = await real_acquire(store, run_id, owner, lease_s)
        if run_id == started.run_id:
            claimed.set()
            await released.wait()
        return token

    async def resume(manager, tenant, req):
        try:
            return await real_resume(manager, tenant, req)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    monkeypatch.setattr(RunStore, "acquire_lease", acquire_lease)
    monkeypatch.setattr(RunManager, "resume", resume)
    call = mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id,
            decisions=[pb.ApprovalDecision(call_id=run.pending_calls[0].call.call_id, approved=True)],
        )
    )
    await asyncio.wait_for(claimed.wait(), WAIT_S)
    call.cancel()
    await asyncio.wait_for(cancelled.wait(), WAIT_S)
    released.set()
    done = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert done.final_output == "finished"
