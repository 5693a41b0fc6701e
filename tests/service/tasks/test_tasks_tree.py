"""Deleting a session removes its task tree; a recreated id never inherits it; WatchTasks."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.tasks.domain import Limits
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent
from tests.service.tasks.harness import until

SLEEPS = Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])
PAUSES = Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])
GATED = agent(tools=[rpb.AgentTool(name="exec_command", needs_approval=True)])


async def _gone(tm, task_id: str) -> bool:
    try:
        await tm.get(task_id)
    except grpc.aio.AioRpcError as err:
        return reason_of(err) == "TASK_NOT_FOUND"
    return False


async def test_deleting_the_parent_removes_the_tree_at_every_depth(tm):
    deep, _ = await tm.replica(limits=Limits(max_depth=2))
    parent = await tm.parent()
    tm.mesh.emu.script([PAUSES, SLEEPS])
    outer = await tm.spawn(parent, stub=deep, agent=GATED)
    inner = await tm.spawn(outer.session_id, stub=deep)
    await tm.mesh.events(inner.run_id, until="tool_called")
    await tm.mesh.sessions.DeleteSession(spb.DeleteSessionRequest(session=spb.SessionRef(session_id=parent)))
    for task in (outer, inner):
        await until(lambda t=task: _gone(tm, t.task_id), bool, "the task rows to be removed")
    # their runs were stopped, their hidden sessions are gone
    assert (await tm.wait_run(inner.run_id, cpb.RUN_STATUS_CANCELED, cpb.RUN_STATUS_FAILED)).status
    assert (await tm.wait_run(outer.run_id, cpb.RUN_STATUS_CANCELED, cpb.RUN_STATUS_FAILED)).status
    for hidden in (outer.session_id, inner.session_id):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await tm.mesh.sessions.GetSession(
                spb.GetSessionRequest(session=spb.SessionRef(session_id=hidden))
            )
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_recreated_session_does_not_inherit_the_dead_ones_tasks(tm):
    parent = await tm.parent()
    tm.mesh.emu.script([Reply(text="old life")])
    old = await tm.spawn(parent)
    await tm.wait_task(old.task_id, pb.TASK_STATUS_COMPLETED)
    await tm.mesh.sessions.DeleteSession(spb.DeleteSessionRequest(session=spb.SessionRef(session_id=parent)))
    await tm.mesh.sessions.CreateSession(spb.CreateSessionRequest(session_id=parent))
    listed = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=parent))).tasks
    assert list(listed) == []  # bound to the old generation: inert at once
    await until(lambda: _gone(tm, old.task_id), bool, "the dead incarnation's task to be removed")
    tm.mesh.emu.script([Reply(text="new life")])
    new = await tm.spawn(parent)
    listed = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=parent))).tasks
    assert [t.task_id for t in listed] == [new.task_id]


async def test_watch_streams_changes_and_resumes_from_a_cursor(tm):
    parent = await tm.parent()
    seen: list[pb.Task] = []
    finished = asyncio.Event()

    async def watch() -> None:
        async for msg in tm.tasks.WatchTasks(pb.WatchTasksRequest(parent_session_id=parent)):
            seen.append(msg.task)
            if msg.task.status == pb.TASK_STATUS_COMPLETED and msg.task.notified_seq:
                finished.set()

    watcher = asyncio.create_task(watch())
    tm.mesh.emu.script([Reply(text="watched")])
    task = await tm.spawn(parent)
    await asyncio.wait_for(finished.wait(), WAIT_S)
    seqs = [t.change_seq for t in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {t.task_id for t in seen} == {task.task_id} and all(t.result == "" for t in seen)
    assert seen[-1].status == pb.TASK_STATUS_COMPLETED
    # a new watch after a cursor gets only what came after it
    later = await _take(
        tm.tasks.WatchTasks(
            pb.WatchTasksRequest(parent_session_id=parent, after_change_seq=seen[0].change_seq)
        ),
        lambda t: t.change_seq == seen[-1].change_seq,
    )
    assert (
        all(t.change_seq > seen[0].change_seq for t in later) and later[-1].status == pb.TASK_STATUS_COMPLETED
    )
    # deleting the parent ends the stream
    await tm.mesh.sessions.DeleteSession(spb.DeleteSessionRequest(session=spb.SessionRef(session_id=parent)))
    await asyncio.wait_for(watcher, WAIT_S)


async def _take(stream, last) -> list[pb.Task]:
    """Read a WatchTasks stream until last(task) holds, then hang up."""
    out: list[pb.Task] = []

    async def read() -> None:
        async for msg in stream:
            out.append(msg.task)
            if last(msg.task):
                return

    try:
        await asyncio.wait_for(read(), WAIT_S)
    finally:
        stream.cancel()
    return out
