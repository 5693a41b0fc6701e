"""Replicas and restarts: adoption, the restart sweep, two finalizers, a stale approval."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.status import reason_of
from agentrt.tasks.domain import Failure, Outcome, TaskStatus
from agentrt.tasks.server import build_server
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent
from tests.service.tasks.harness import crash, mid_launch, tasks_config


async def test_a_replica_adopts_the_task_of_a_dead_one_and_the_task_completes(tm):
    parent = await tm.parent()
    tm.mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 0.5"}')]), Reply(text="survived")]
    )
    task = await tm.spawn(parent)
    crash(tm.server)  # the follower dies with its lease held
    other, replica = await tm.replica()
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "survived" and done.attempt == 1  # the run lived on in RunService
    assert replica.attempts is not None
    await tm.wait_notified(task.task_id)
    assert len(await tm.notifications(parent)) == 1  # told once


async def test_the_restart_sweep_fails_what_was_left_mid_launch_before_serving(tm):
    parent = await tm.parent()
    stale = await mid_launch(tm, parent, owner="tasks-restarted", lease_until=time.time() + 3600)
    expired = await mid_launch(tm, parent, owner="tasks-gone", lease_until=time.time() - 1)
    held = await mid_launch(tm, parent, owner="tasks-alive", lease_until=time.time() + 3600)
    # the same replica name comes back: what it held counts as stale; a live lease of another is kept
    server = build_server(tasks_config(tm.mesh, tm.db_url, replica_id="tasks-restarted"))
    address = await tm.start_server(server)
    stub = pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(address))
    async with grpc.aio.insecure_channel(address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    for orphan in (stale, expired):
        got = (await stub.GetTask(pb.GetTaskRequest(task_id=orphan.task_id))).task
        assert got.status == pb.TASK_STATUS_FAILED and got.failure.kind == "interrupted" and got.attempt == 1
    assert (await stub.GetTask(pb.GetTaskRequest(task_id=held.task_id))).task.status == pb.TASK_STATUS_WORKING
    # each parent is told
    assert len(await tm.wait_notes(parent, 2)) == 2
    # a retry after the sweep runs once
    tm.mesh.emu.script([Reply(text="ran once")])
    retried = await stub.RetryTask(pb.RetryTaskRequest(task_id=stale.task_id))
    assert retried.launched and retried.task.attempt == 2
    done = await tm.wait_task(stale.task_id, pb.TASK_STATUS_COMPLETED)
    runs = (await tm.mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=done.session_id))).runs
    assert [r.run_id for r in runs] == [done.run_id]


async def test_two_servers_racing_to_finalize_one_wins(tm):
    """Both replicas follow the same run (one by its lease, one forced) and both see it end."""
    parent = await tm.parent()
    tm.mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 0.5"}')]), Reply(text="x")]
    )
    task = await tm.spawn(parent)
    _, other = await tm.replica()
    row = await other.deps.store.get("default", task.task_id)
    other.attempts.follow(row)
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "x"
    await tm.wait_notified(task.task_id)
    assert len(await tm.notifications(parent)) == 1


async def test_racing_finalizers_on_the_store_one_wins(tm, backend):
    """Many concurrent finalizers of one launch, each on its own database connection."""
    from agentrt.mesh.storage.db import Database
    from agentrt.tasks.storage.store import TaskStore

    parent = await tm.parent()
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])])
    task = await tm.spawn(parent)
    crash(tm.server)
    dbs = [Database(tm.db_url) for _ in range(4)]
    try:
        row = await TaskStore(dbs[0]).get("default", task.task_id)
        outcomes = [
            Outcome(TaskStatus.COMPLETED, output="a"),
            Outcome(TaskStatus.FAILED, failure=Failure("k", "b")),
            Outcome(TaskStatus.CANCELED),
            Outcome(TaskStatus.COMPLETED, output="d"),
        ]
        results = await asyncio.gather(
            *(TaskStore(db).finalize(row, row.launch_id, o, "") for db, o in zip(dbs, outcomes, strict=True))
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        final = await TaskStore(dbs[0]).get("default", task.task_id)
        assert final.status == winners[0].status and final.result == winners[0].result
    finally:
        for db in dbs:
            await db.close()
    await tm.mesh.runs.CancelRun(rpb.CancelRunRequest(run_id=task.run_id))


async def test_an_approval_on_an_old_attempt_does_not_touch_the_new_one(tm):
    parent = await tm.parent()
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])])
    gated = agent(tools=[rpb.AgentTool(name="exec_command", needs_approval=True)])
    task = await tm.spawn(parent, agent=gated)
    paused = await tm.wait_task(task.task_id, pb.TASK_STATUS_INPUT_REQUIRED)
    old_run = await tm.wait_run(task.run_id, cpb.RUN_STATUS_SUSPENDED)
    store = tm.server.deps.store
    row = await store.get("default", task.task_id)
    old_launch = row.launch_id
    # attempt 1 ends while its approval is still open (as the restart sweep or a reaper would end it)
    ended = await store.finalize(
        row, old_launch, Outcome(TaskStatus.FAILED, failure=Failure("test", "ended")), ""
    )
    assert ended is not None and paused.run_id == old_run.run_id
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])])
    retried = await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=task.task_id))
    assert retried.launched and retried.task.attempt == 2
    second = await tm.wait_task(task.task_id, pb.TASK_STATUS_INPUT_REQUIRED)
    assert second.run_id != old_run.run_id
    # the old attempt's approval is refused by the run loop (its run was ended before the retry)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.mesh.runs.ResumeRun(
            rpb.ResumeRunRequest(
                run_id=old_run.run_id,
                decisions=[
                    rpb.ApprovalDecision(call_id=old_run.pending_calls[0].call.call_id, approved=True)
                ],
            )
        )
    assert reason_of(info.value) == "RUN_FINISHED"
    # and writes naming the old attempt change nothing on the new one
    now = await store.get("default", task.task_id)
    assert await store.reclaim_working(now, old_launch) is None
    assert await store.mark_input_required(now, old_launch) is None
    assert await store.finalize(now, old_launch, Outcome(TaskStatus.COMPLETED, output="stale"), "") is None
    after = await tm.get(task.task_id)
    assert (after.status, after.run_id, after.attempt) == (pb.TASK_STATUS_INPUT_REQUIRED, second.run_id, 2)
    await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))


async def test_the_sweep_cancels_the_run_an_interrupted_launch_had_started(tm):
    """StartRun went through, then the process died before binding the run: at its restart the
    sweep fails the task, and the run it cannot see in the row is found by its launch label
    and cancelled."""
    parent = await tm.parent()
    orphan = await mid_launch(tm, parent, owner="tasks-dead", lease_until=time.time() + 3600)
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])])
    request = tm.server.attempts.launcher.request(orphan, orphan.launch_id, "go")
    run_id = (await tm.mesh.runs.StartRun(request)).run_id
    await tm.mesh.events(run_id, until="tool_called")
    restarted = build_server(tasks_config(tm.mesh, tm.db_url, replica_id="tasks-dead"))
    stub = pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(await tm.start_server(restarted)))
    failed = (await stub.GetTask(pb.GetTaskRequest(task_id=orphan.task_id))).task
    assert (failed.status, failed.failure.kind, failed.run_id) == (pb.TASK_STATUS_FAILED, "interrupted", "")
    assert (await tm.wait_run(run_id, cpb.RUN_STATUS_CANCELED)).status == cpb.RUN_STATUS_CANCELED
    tm.mesh.emu.script([Reply(text="clean")])
    retried = await stub.RetryTask(pb.RetryTaskRequest(task_id=orphan.task_id))
    assert retried.launched
    assert (await tm.wait_task(orphan.task_id, pb.TASK_STATUS_COMPLETED)).result == "clean"
