"""Retry in place (failed -> working) under the attempt ceiling; a failed launch is not an attempt."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentrt.core.tasknote import parse_notification
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_of
from agentrt.runs.config import RunsConfig
from agentrt.runs.server import build_server as build_runs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply
from tests.service.runs.harness import agent

FAILS = ErrorReply(status=400, message="bad request from the test")


async def _failed_task(tm, parent: str, **kw) -> pb.Task:
    tm.mesh.emu.script([FAILS])
    task = await tm.spawn(parent, **kw)
    return await tm.wait_task(task.task_id, pb.TASK_STATUS_FAILED)


async def test_a_failed_task_is_retried_in_place(tm):
    parent = await tm.parent()
    failed = await _failed_task(tm, parent, label="flaky")
    assert failed.failure.kind and failed.result and failed.attempt == 1
    first_run = failed.run_id
    await tm.wait_notified(failed.task_id)
    [line] = parse_notification((await tm.notifications(parent))[0].item.message.content[0].text.text)
    assert line.status == "failed" and line.attempt == 1
    assert (
        "may be retried (2 attempts left)"
        in (await tm.notifications(parent))[0].item.message.content[0].text.text
    )

    tm.mesh.emu.script([Reply(text="fixed it")])
    retried = await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id))
    assert retried.launched and retried.task.status == pb.TASK_STATUS_WORKING and retried.task.attempt == 2
    assert (
        retried.task.run_id != first_run
        and retried.task.result == ""
        and not retried.task.HasField("failure")
    )
    assert retried.task.session_id == failed.session_id  # the same hidden session: resumed, not restarted
    done = await tm.wait_task(failed.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "fixed it" and done.attempt == 2
    entries = await tm.mesh.entries(failed.session_id)
    inputs = [e.item.message.content[0].text.text for e in entries if e.item.message.role == cpb.ROLE_USER]
    assert inputs[0] == "go" and "previous attempt" in inputs[-1] and failed.failure.message in inputs[-1]
    lines = [
        parse_notification(e.item.message.content[0].text.text)[0] for e in await tm.wait_notes(parent, 2)
    ]
    assert [(x.status, x.attempt) for x in lines] == [("failed", 1), ("completed", 2)]


async def test_the_attempt_ceiling_and_what_is_retryable(tm):
    parent = await tm.parent()
    failed = await _failed_task(tm, parent)
    for attempt in (2, 3):
        tm.mesh.emu.script([FAILS])
        again = await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id))
        assert again.launched and again.task.attempt == attempt
        failed = await tm.wait_task(failed.task_id, pb.TASK_STATUS_FAILED)
    assert failed.attempt == failed.max_attempts == 3
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "TASK_ATTEMPTS_EXHAUSTED"
    # the last failure's notification has no retry hint (a retry drops an ending not yet notified)
    await tm.wait_notified(failed.task_id)
    last = (await tm.notifications(parent))[-1].item.message.content[0].text.text
    assert "attempt=3/3" in last and "retry:" not in last
    # only a failed task is retried
    tm.mesh.emu.script([Reply(text="done")])
    ok = await tm.spawn(parent)
    await tm.wait_task(ok.task_id, pb.TASK_STATUS_COMPLETED)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=ok.task_id))
    assert (
        info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        and reason_of(info.value) == "TASK_NOT_RETRYABLE"
    )


async def test_a_retry_takes_a_concurrency_slot(tm, backend):
    from tests.service.tasks.harness import tasks_config

    server = await tm.replica(limits=tasks_config(tm.mesh, tm.db_url).limits.__class__(max_live_per_parent=1))
    stub = server[0]
    parent = await tm.parent()
    tm.mesh.emu.script([FAILS])
    failed = await tm.spawn(parent, stub=stub)
    await tm.wait_task(failed.task_id, pb.TASK_STATUS_FAILED)
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])])
    spec = agent(tools=[rpb.AgentTool(name="exec_command", needs_approval=True)])
    live = await tm.spawn(parent, stub=stub, agent=spec)
    await tm.wait_task(live.task_id, pb.TASK_STATUS_INPUT_REQUIRED)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and reason_of(info.value) == "TASK_LIMIT"
    assert (await tm.get(failed.task_id)).status == pb.TASK_STATUS_FAILED  # the refusal changed nothing
    await stub.StopTask(pb.StopTaskRequest(task_id=live.task_id))
    tm.mesh.emu.script([Reply(text="now there is room")])
    retried = await stub.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id))
    assert retried.launched


async def test_two_replicas_racing_one_retry_launch_one_run(tm):
    other, _ = await tm.replica()
    parent = await tm.parent()
    failed = await _failed_task(tm, parent)
    tm.mesh.emu.script([Reply(text="once")])
    results = await asyncio.gather(
        tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id)),
        other.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id)),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, pb.RetryTaskResponse)]
    lost = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(won) == 1 and won[0].launched and len(lost) == 1
    assert reason_of(lost[0]) in ("RETRY_CONFLICT", "TASK_NOT_RETRYABLE")
    done = await tm.wait_task(failed.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.attempt == 2
    runs = (await tm.mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=failed.session_id))).runs
    assert len(runs) == 2  # the failed first run and one retry


async def test_a_retry_whose_run_cannot_start_does_not_count(tm):
    impatient, _ = await tm.replica(peer_unavailable_seconds=0.1)
    parent = await tm.parent()
    failed = await _failed_task(tm, parent)
    await tm.wait_notified(failed.task_id)
    # RunService goes away: the retry claims the row, then cannot launch
    runs_server, address = tm.mesh.runs_server, tm.mesh.runs_address
    await runs_server.stop(grace=0)
    released = await impatient.RetryTask(pb.RetryTaskRequest(task_id=failed.task_id))
    assert not released.launched
    task = released.task
    assert task.status == pb.TASK_STATUS_FAILED and task.attempt == 1  # rolled back: not an attempt
    assert task.failure.kind == "launch_failed" and "could not be started" in task.result
    # the launch failure is owed to the parent like any ending
    assert len(await tm.wait_notes(parent, 2)) == 2
    # RunService comes back on the same address: the retry now runs, as attempt 2
    port = int(address.rsplit(":", 1)[1])
    config = runs_server.config
    replacement = build_runs(
        RunsConfig(
            server=ServerConfig(port=port, db_url=config.db_url, state_dir=tm.mesh.tmp),
            gateway_address=tm.mesh.addresses["gateway"],
            tools_address=tm.mesh.addresses["tools"],
            sessions_address=tm.mesh.addresses["sessions"],
            tasks_address="",
            default_model="openai:gpt-test",
        )
    )
    await tm.start_server(replacement)
    tm.mesh.emu.script([Reply(text="second time lucky")])
    again = await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=task.task_id))
    assert again.launched and again.task.attempt == 2
    assert (await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)).result == "second time lucky"


async def test_a_spawn_whose_first_run_cannot_start_is_rolled_back(tm):
    parent = await tm.parent()
    bad = agent(tools=[rpb.AgentTool(name="no_such_tool")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.spawn(parent, agent=bad)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(info.value) == "UNKNOWN_TOOL"
    assert list((await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=parent))).tasks) == []
    from agentrt.v1 import session_service_pb2 as spb

    sessions = (await tm.mesh.sessions.ListSessions(spb.ListSessionsRequest(include_hidden=True))).sessions
    assert [s.session_id for s in sessions if s.parent_session_id == parent] == []  # no hidden session left
