"""kill -9 of the task replica following a chain of runs, mid-chain, on PostgreSQL (decision 0052).

Two `agentrt serve tasks` processes on one database (replicas "chain-a" and "chain-b", a 1 s
lease); the rest of the mesh in this process. A task of six steps is spawned on "chain-a",
which is killed with SIGKILL once the chain has advanced `k` times: mostly as it launches the
next step (claimed, StartRun not yet answered), sometimes while that step's run works.
"chain-b" then either adopts the task when the lease expires and finishes the chain, or its
sweep fails the interrupted launch (retryable; decision 0008, as a spawn killed mid-launch),
whose run may have started before the kill (StartRun answered, not yet recorded). Either
way: one run per step that ran, none left running, no model request made twice, and the
parent told once.
"""

from __future__ import annotations

import pytest
from test_tasks_kill import TaskProcess, _notes

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.ports import free_ports
from tests.service.runs.harness import start_mesh
from tests.service.tasks.harness import TaskMesh, tasks_db_url, until

pytestmark = pytest.mark.slow

STEPS = 6


@pytest.mark.parametrize("k", [1, 2, 4])
async def test_kill_9_mid_chain_then_another_replica_finishes_it_once(
    start_server, tmp_path, emulator, k: int
):
    mesh = await start_mesh(start_server, tmp_path, emulator)
    db_url = await tasks_db_url("postgres", mesh.tmp)
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = TaskProcess(a_dir, free_ports(1)[0], db_url, mesh.runs_address, mesh.addresses["sessions"])
    b = TaskProcess(b_dir, free_ports(1)[0], db_url, mesh.runs_address, mesh.addresses["sessions"])
    a.env["AGENTRT_TASKS_REPLICA_ID"], b.env["AGENTRT_TASKS_REPLICA_ID"] = "chain-a", "chain-b"
    try:
        tm = TaskMesh(mesh, await a.start(), None, "", db_url, None)  # type: ignore[arg-type]
        b_stub = await b.start()
        emulator.script([Reply(text=f"done {i}", reply_delay=0.3) for i in range(1, STEPS + 1)])
        parent = await tm.parent()
        task = await tm.spawn(parent, steps=[f"step {i}" for i in range(2, STEPS + 1)])
        await until(lambda: tm.get(task.task_id), lambda t: t.continuations >= k, f"{k} advances")
        a.kill()
        done = await until(
            lambda: tm.get(task.task_id, b_stub),
            lambda t: t.status in (pb.TASK_STATUS_COMPLETED, pb.TASK_STATUS_FAILED),
            "the task to end on chain-b",
        )
        runs = (await mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=task.session_id))).runs
        assert all(r.status == cpb.RUN_STATUS_COMPLETED for r in runs), runs  # none left running
        if done.status == pb.TASK_STATUS_COMPLETED:  # killed while a step's run worked: adopted
            assert (done.result, done.step, done.continuations) == (f"done {STEPS}", STEPS - 1, STEPS - 1)
            assert len(runs) == STEPS  # one run per step
        else:  # killed as it launched the next step: the launch is interrupted (decision 0008)
            assert done.failure.kind == "interrupted" and done.failure.retryable, (done.failure, b.log())
            # The steps before it ran; the launch the kill cut either never reached the runs
            # service or started a run the dead replica never recorded (it ran once, to its end:
            # the task failed anyway; a gap written in decision 0052).
            assert len(runs) in (done.continuations, done.continuations + 1), runs
        assert len(emulator.requests) == len(runs)  # no model call made twice
        tm.tasks = b_stub
        await tm.wait_notified(task.task_id)
        await until(lambda: _notes(mesh, parent), lambda n: len(n) == 1, "the parent to be told")
        assert len(await _notes(mesh, parent)) == 1
    finally:
        a.stop()
        b.stop()
