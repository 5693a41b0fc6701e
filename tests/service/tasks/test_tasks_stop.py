"""StopTask's four answers, its bounded wait for a late outcome, and the races it must win."""

from __future__ import annotations

import grpc

from agentrt.tasks.domain import Failure, Outcome, TaskStatus
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent
from tests.service.tasks.harness import crash, mid_launch, runs_replica, task_mesh, tasks_config

SLEEPS = Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])


async def _running(tm, parent: str) -> pb.Task:
    """A task whose run is busy in a 30 s command."""
    tm.mesh.emu.script([SLEEPS])
    task = await tm.spawn(parent)
    await tm.mesh.events(task.run_id, until="tool_called")
    return task


async def test_stop_a_working_task_cancels_its_run(tm):
    parent = await tm.parent()
    task = await _running(tm, parent)
    stopped = await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id, reason="not needed"))
    assert stopped.outcome == pb.STOP_OUTCOME_CANCELED and stopped.task.status == pb.TASK_STATUS_CANCELED
    assert (await tm.run(task.run_id)).status == cpb.RUN_STATUS_CANCELED
    # a cancellation is delivered by the person who made it: nothing is owed to the parent
    assert stopped.task.pending_delivery_id == ""
    again = await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert again.outcome == pb.STOP_OUTCOME_ALREADY_FINISHED and again.task.status == pb.TASK_STATUS_CANCELED
    assert await tm.notifications(parent) == []


async def test_stop_a_paused_task_claims_it_then_cancels_its_run(tm):
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])])
    spec = agent(tools=[rpb.AgentTool(name="exec_command", needs_approval=True)])
    task = await tm.spawn(await tm.parent(), agent=spec)
    await tm.wait_task(task.task_id, pb.TASK_STATUS_INPUT_REQUIRED)
    stopped = await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert stopped.outcome == pb.STOP_OUTCOME_CANCELED
    assert (await tm.wait_run(task.run_id, cpb.RUN_STATUS_CANCELED)).status == cpb.RUN_STATUS_CANCELED
    # an approval arriving now is refused as stale by the run loop, and changes nothing here
    run = await tm.run(task.run_id)
    assert run.status == cpb.RUN_STATUS_CANCELED
    assert (await tm.get(task.task_id)).status == pb.TASK_STATUS_CANCELED


async def test_stop_a_finished_task_changes_nothing(tm):
    tm.mesh.emu.script([Reply(text="done")])
    task = await tm.spawn(await tm.parent())
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    stopped = await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert stopped.outcome == pb.STOP_OUTCOME_ALREADY_FINISHED
    assert stopped.task.status == pb.TASK_STATUS_COMPLETED and stopped.task.result == done.result


async def test_a_stop_during_the_launch_cancels_the_run_the_launch_then_starts(tm):
    """The re-read after launching: the stop lands between the claim and StartRun."""
    placed = task = await mid_launch(tm, await tm.parent())
    stopped = await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert stopped.outcome == pb.STOP_OUTCOME_CANCELED and stopped.task.run_id == ""
    tm.mesh.emu.script([SLEEPS])
    after = await tm.server.attempts.launcher.start(placed, placed.launch_id, "go")
    assert after.status == TaskStatus.CANCELED and after.run_id == ""
    [run] = (await tm.mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=placed.session_id))).runs
    assert (await tm.wait_run(run.run_id, cpb.RUN_STATUS_CANCELED)).status == cpb.RUN_STATUS_CANCELED


async def test_a_stop_chases_the_retry_that_landed_between_its_read_and_its_call(tm):
    """The stop read attempt 1; attempt 1 failed and a retry started attempt 2 before the
    stop reached the run loop, which answers "already finished" for attempt 1's run."""
    parent = await tm.parent()
    task = await _running(tm, parent)
    stopper, store = tm.server.manager.stopper, tm.server.deps.store
    real, fired = stopper.stop_run, []

    async def retry_lands_first(tenant: str, run_id: str, reason: str):
        if not fired:
            fired.append(run_id)
            row = await store.get(tenant, task.task_id)
            lost = Failure("test", "attempt 1 failed")
            assert (
                await store.finalize(row, row.launch_id, Outcome(TaskStatus.FAILED, failure=lost), "")
                is not None
            )
            tm.mesh.emu.script([SLEEPS])
            retried = await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=task.task_id))
            assert retried.launched and retried.task.attempt == 2
        return await real(tenant, run_id, reason)

    stopper.stop_run = retry_lands_first
    stopped = await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert fired == [task.run_id]
    assert stopped.outcome == pb.STOP_OUTCOME_CANCELED
    assert stopped.task.status == pb.TASK_STATUS_CANCELED and stopped.task.attempt == 2
    second = stopped.task.run_id
    assert second and second != task.run_id
    # neither run is left executing for a task that is stopped
    assert (await tm.wait_run(second, cpb.RUN_STATUS_CANCELED)).status == cpb.RUN_STATUS_CANCELED
    assert (await tm.run(task.run_id)).status == cpb.RUN_STATUS_CANCELED


async def test_a_late_outcome_is_kept_not_overwritten(tm):
    """The run completed, but its follower died before recording it: the stop waits, then
    records the run's own ending (FINISHED_FIRST), not a cancellation."""
    parent = await tm.parent()
    tm.mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 0.3"}')]), Reply(text="real")]
    )
    task = await tm.spawn(parent)
    crash(tm.server)  # nobody follows the run now
    await tm.wait_run(task.run_id, cpb.RUN_STATUS_COMPLETED)
    other, _ = await tm.replica(lease_seconds=60.0)  # its lease loop will not adopt in time
    stopped = await other.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert stopped.outcome == pb.STOP_OUTCOME_FINISHED_FIRST
    assert stopped.task.status == pb.TASK_STATUS_COMPLETED and stopped.task.result == "real"
    assert stopped.task.pending_delivery_id  # a real completion is owed to the parent


async def test_after_turn_when_another_run_loop_replica_owns_the_run(
    start_server, tmp_path, emulator, backend
):
    tm = await task_mesh(start_server, tmp_path, emulator, backend, lease_seconds=0.6, replica_id="runs-a")
    runs_b = await runs_replica(tm, lease_seconds=0.6, replica_id="runs-b")
    from agentrt.tasks.server import build_server

    via_b = build_server(tasks_config(tm.mesh, tm.db_url, runs_address=runs_b))
    stub_b = pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(await start_server(via_b)))
    parent = await tm.parent()
    task = await _running(tm, parent)  # launched through runs-a, which executes it
    stopped = await stub_b.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    assert stopped.outcome == pb.STOP_OUTCOME_AFTER_TURN and stopped.task.status == pb.TASK_STATUS_WORKING
    # runs-a honours the request at its next lease renewal; the run records its own ending
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_CANCELED)
    assert done.pending_delivery_id == ""
    assert (await tm.run(task.run_id)).status == cpb.RUN_STATUS_CANCELED
