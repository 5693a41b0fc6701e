"""The bounds of 004 §2.13: depth, live tasks per parent, summaries, the wait, idempotent spawns."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.protobuf import duration_pb2

from agentrt.core.errors import MeshError
from agentrt.mesh.status import reason_of
from agentrt.mesh.storage.db import Database
from agentrt.tasks.domain import Limits
from agentrt.tasks.manager import TaskManager
from agentrt.tasks.storage.store import TaskStore
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

PAUSES = Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])
GATED = agent(tools=[rpb.AgentTool(name="exec_command", needs_approval=True)])


def test_the_defaults_are_the_seeds():
    limits = Limits()
    assert (limits.max_depth, limits.max_live_per_parent, limits.max_attempts) == (1, 6, 3)
    assert (limits.summary_chars, limits.max_wait_seconds, limits.max_continuations) == (300, 120.0, 50)


async def test_a_task_cannot_spawn_tasks_by_default(tm):
    tm.mesh.emu.script([PAUSES])
    task = await tm.spawn(await tm.parent(), agent=GATED)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.spawn(task.session_id)
    assert (
        info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        and reason_of(info.value) == "TASK_DEPTH_LIMIT"
    )


async def test_depth_two_when_allowed_and_unknown_depth_refuses(tm):
    deeper, _ = await tm.replica(limits=Limits(max_depth=2))
    tm.mesh.emu.script([PAUSES, Reply(text="deep")])
    outer = await tm.spawn(await tm.parent(), stub=deeper, agent=GATED)
    inner = await tm.spawn(outer.session_id, stub=deeper)
    assert inner.depth == 2 and inner.parent_session_id == outer.session_id
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.spawn(inner.session_id, stub=deeper)
    assert reason_of(info.value) == "TASK_DEPTH_LIMIT"
    # a hidden session that serves no task we know: its depth cannot be told, so no
    hidden = await tm.mesh.sessions.CreateSession(
        spb.CreateSessionRequest(hidden=True, parent_session_id=await tm.parent())
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.spawn(hidden.session.session_id, stub=deeper)
    assert (
        info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        and reason_of(info.value) == "TASK_DEPTH_UNKNOWN"
    )


async def test_a_depth_lookup_that_fails_refuses(tm):
    """A store that cannot be read is not "this parent is not a task" (which would restart the count)."""
    broken = Database("postgresql+asyncpg://postgres@127.0.0.1:1/nowhere", connect_args={"timeout": 2})
    try:
        deps = tm.server.deps
        manager = TaskManager(
            type(deps)(**{**deps.__dict__, "store": TaskStore(broken)}),
            tm.server.attempts,
            tm.server.manager.trees,
        )
        with pytest.raises(MeshError) as info:
            await manager._depth("default", "ses_x", hidden=True)
        assert info.value.status == "UNAVAILABLE" and info.value.reason == "DEPENDENCY_UNAVAILABLE"
    finally:
        await broken.close()


async def test_six_live_tasks_per_parent(tm):
    parent = await tm.parent()
    tm.mesh.emu.script([PAUSES] * 6)
    live = [await tm.spawn(parent, agent=GATED) for _ in range(6)]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.spawn(parent)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and reason_of(info.value) == "TASK_LIMIT"
    # other parents are not affected; a slot frees when a task ends
    tm.mesh.emu.script([Reply(text="elsewhere")])
    assert (await tm.spawn(await tm.parent())).status == pb.TASK_STATUS_WORKING
    await tm.tasks.StopTask(pb.StopTaskRequest(task_id=live[0].task_id))
    tm.mesh.emu.script([Reply(text="fits now")])
    assert (await tm.spawn(parent)).status == pb.TASK_STATUS_WORKING


async def test_two_replicas_racing_for_the_last_slot(tm):
    other, _ = await tm.replica(limits=Limits(max_live_per_parent=2))
    first, _ = await tm.replica(limits=Limits(max_live_per_parent=2))
    parent = await tm.parent()
    tm.mesh.emu.script([PAUSES] * 3)
    await tm.spawn(parent, stub=first, agent=GATED)
    results = await asyncio.gather(
        tm.spawn(parent, stub=first, agent=GATED),
        tm.spawn(parent, stub=other, agent=GATED),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(refused) == 1 and reason_of(refused[0]) == "TASK_LIMIT"
    live = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=parent))).tasks
    assert len(live) == 2


async def test_summaries_are_bounded_and_results_whole(tm):
    long = "word " * 400
    tm.mesh.emu.script([Reply(text=long)])
    task = await tm.spawn(await tm.parent())
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == long.strip() or done.result == long
    assert len(done.summary) <= 300 and done.summary.endswith("…")


async def test_get_waits_for_the_task_to_leave_working(tm):
    tm.mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 0.5"}')]), Reply(text="ok")]
    )
    task = await tm.spawn(await tm.parent())
    waited = await tm.tasks.GetTask(
        pb.GetTaskRequest(task_id=task.task_id, wait=duration_pb2.Duration(seconds=30))
    )
    assert waited.task.status == pb.TASK_STATUS_COMPLETED and waited.task.result == "ok"
    # a wait on a task that does not change ends at its bound, with the task as it is
    tm.mesh.emu.script([PAUSES])
    paused = await tm.spawn(await tm.parent(), agent=GATED)
    await tm.wait_task(paused.task_id, pb.TASK_STATUS_INPUT_REQUIRED)
    started = time.monotonic()
    quick = await tm.tasks.GetTask(
        pb.GetTaskRequest(task_id=paused.task_id, wait=duration_pb2.Duration(seconds=30))
    )
    assert quick.task.status == pb.TASK_STATUS_INPUT_REQUIRED and time.monotonic() - started < 30


async def test_a_spawn_replayed_with_its_key_starts_nothing(tm):
    parent = await tm.parent()
    tm.mesh.emu.script([Reply(text="once")])
    first = await tm.spawn(parent, idempotency_key="call_1")
    again = await tm.spawn(parent, idempotency_key="call_1")
    assert again.task_id == first.task_id
    await tm.wait_task(first.task_id, pb.TASK_STATUS_COMPLETED)
    assert len((await tm.mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=first.session_id))).runs) == 1
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.spawn(parent, idempotency_key="call_1", input="something else")
    assert (
        info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and reason_of(info.value) == "IDEMPOTENCY_KEY_REUSED"
    )
