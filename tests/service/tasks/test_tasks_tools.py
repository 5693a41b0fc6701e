"""The task tools through a real run: spawn_task, task_status, task_retry, task_stop (004 §2.13).

A registered agent lists the task tools; the run loop sends their calls to the tool
service, which calls TaskService. The emulator answers by what each request holds (the
parent's conversation, or a task's own), so concurrent runs never take each other's reply.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any

import grpc
import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from tests.conftest import rpc_error_reason
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent
from tests.service.tasks.harness import TaskMesh, task_mesh, until

_TASK_ID = re.compile(r"tsk_[A-Za-z0-9]+")


async def register(tm: TaskMesh, name: str = "lead", tools: tuple[str, ...] = ()) -> None:
    """Register an agent on the emulator's model with the task tools (and `tools`)."""
    names = ("spawn_task", "task_status", "task_retry", "task_stop", *tools)
    spec = agent(name=name, tools=[rpb.AgentTool(name=n) for n in names])
    await tm.mesh.runs.RegisterAgent(rpb.RegisterAgentRequest(agent=spec))


def tool_outputs(body: Any) -> list[str]:
    """The tool outputs a model request carries, in order (OpenAI Responses input items)."""
    items = body.get("input", []) if isinstance(body, dict) else []
    return [
        str(i.get("output", ""))
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]


async def start(tm: TaskMesh, text: str, name: str = "lead") -> rpb.StartRunResponse:
    """StartRun of the registered agent on a new session."""
    return await tm.mesh.runs.StartRun(rpb.StartRunRequest(agent_name=name, input=text))


async def test_spawn_then_status_hands_the_result_to_the_model_once(
    start_server, tmp_path, emulator, backend
):
    # a long grace: the ending can only be delivered by task_status, never raced by a notification
    tm = await task_mesh(start_server, tmp_path, emulator, backend, tasks_kw={"notify_grace_seconds": 60.0})
    await register(tm)

    def respond(path: str, body: Any) -> Reply | None:
        text = json.dumps(body)
        if "CHILD-WORK" in text and "PARENT" not in text:
            return Reply(text="the answer is 42")
        outs = tool_outputs(body)
        if not outs:
            return Reply(
                tool_calls=[ToolCallReply("spawn_task", '{"input": "CHILD-WORK", "label": "compute"}')]
            )
        if len(outs) == 1:
            task_id = _TASK_ID.search(outs[0])
            assert task_id is not None, outs[0]
            args = json.dumps({"task_id": task_id.group(0), "wait_seconds": 30})
            return Reply(tool_calls=[ToolCallReply("task_status", args)])
        return Reply(text="PARENT done")

    tm.mesh.emu.responder = respond
    started = await start(tm, "PARENT go")
    run = await tm.wait_run(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "PARENT done"
    tasks = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=started.session_id))).tasks
    assert len(tasks) == 1
    task = await tm.get(tasks[0].task_id)
    # the task runs as the agent that asked, for the session and run that asked
    assert (task.agent_name, task.parent_run_id, task.label) == ("lead", started.run_id, "compute")
    assert task.status == pb.TASK_STATUS_COMPLETED and task.result == "the answer is 42"
    entries = await tm.mesh.entries(started.session_id)
    outputs = [e.item.tool_result.content for e in entries if e.item.HasField("tool_result")]
    assert any("result:\nthe answer is 42" in o for o in outputs), outputs
    # handed to the model in-turn and acknowledged: no notification follows
    assert task.pending_delivery_id == "" and task.notified_seq == 0
    assert await tm.notifications(started.session_id) == []


async def test_a_task_cannot_spawn_tasks_and_the_model_reads_why(tm):
    await register(tm)

    def respond(path: str, body: Any) -> Reply | None:
        text = json.dumps(body)
        outs = tool_outputs(body)
        if "CHILD-WORK" in text and "PARENT" not in text:
            if not outs:  # the task tries to spawn a task of its own
                return Reply(tool_calls=[ToolCallReply("spawn_task", '{"input": "GRANDCHILD"}')])
            return Reply(text=f"child saw: {outs[0][:200]}")
        if not outs:
            return Reply(tool_calls=[ToolCallReply("spawn_task", '{"input": "CHILD-WORK"}')])
        return Reply(text="PARENT done")

    tm.mesh.emu.responder = respond
    started = await start(tm, "PARENT go")
    await tm.wait_run(started.run_id, cpb.RUN_STATUS_COMPLETED)
    tasks = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=started.session_id))).tasks
    task = await tm.wait_task(tasks[0].task_id, pb.TASK_STATUS_COMPLETED)
    assert "TASK_DEPTH_LIMIT" not in task.result  # the reason stays host-side...
    assert "tasks nest at most 1 deep" in task.result  # ...the model reads the message
    grand = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=task.session_id))).tasks
    assert list(grand) == []


async def test_a_model_cannot_reach_another_sessions_task(tm):
    parent = await tm.parent()
    tm.mesh.emu.script([Reply(text="ok"), Reply(text="other")])
    task = await tm.spawn(parent)
    other = await tm.mesh.runs.StartRun(rpb.StartRunRequest(agent=agent(), input="hi"))
    await tm.wait_run(other.run_id, cpb.RUN_STATUS_COMPLETED)
    for call in (
        tm.tasks.GetTask(pb.GetTaskRequest(task_id=task.task_id, caller_run_id=other.run_id)),
        tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id, caller_run_id=other.run_id)),
        tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=task.task_id, caller_run_id=other.run_id)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert (
            err.value.code() == grpc.StatusCode.NOT_FOUND and rpc_error_reason(err.value) == "TASK_NOT_FOUND"
        )
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await tm.tasks.GetTask(pb.GetTaskRequest(task_id=task.task_id, caller_run_id="not an id!"))
    assert (
        bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and rpc_error_reason(bad.value) == "INVALID_ID"
    )
    # the task itself was not touched, and the service still serves
    assert (await tm.get(task.task_id)).task_id == task.task_id


async def test_an_inline_agent_must_name_the_agent_a_task_runs(tm):
    tm.mesh.emu.script([Reply(text="ok")])
    parent_run = await tm.mesh.runs.StartRun(rpb.StartRunRequest(agent=agent(), input="hi"))
    await tm.wait_run(parent_run.run_id, cpb.RUN_STATUS_COMPLETED)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await tm.tasks.SpawnTask(pb.SpawnTaskRequest(parent_run_id=parent_run.run_id, input="x"))
    assert (
        err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and rpc_error_reason(err.value) == "MISSING_FIELD"
    )
    listed = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=parent_run.session_id))).tasks
    assert list(listed) == []


async def test_the_model_retries_a_failed_task_and_stops_a_running_one(tm):
    await register(tm)
    tries: dict[str, int] = {}
    asked, gate = threading.Event(), threading.Event()

    def respond(path: str, body: Any) -> Reply | ErrorReply | None:
        text = json.dumps(body)
        if "CHILD-FLAKY" in text and "PARENT" not in text:
            tries["flaky"] = tries.get("flaky", 0) + 1
            return ErrorReply(status=400) if tries["flaky"] == 1 else Reply(text="second time lucky")
        if "CHILD-LONG" in text and "PARENT" not in text:
            asked.set()
            gate.wait(WAIT_S)  # the task is working on its model call until the test ends
            return Reply(text="too late")
        outs = tool_outputs(body)
        # later runs hold the whole session: each looks for its own tool's output
        if "PARENT-STOP" in text:
            if not any(o.startswith(("stopped", "stopping", "nothing to stop", "too late")) for o in outs):
                return Reply(tool_calls=[ToolCallReply("task_stop", json.dumps({"task_id": ids["long"]}))])
            return Reply(text="PARENT stopped")
        if "PARENT-RETRY" in text:
            if not any(o.startswith(("retrying", "the retry")) for o in outs):
                return Reply(tool_calls=[ToolCallReply("task_retry", json.dumps({"task_id": ids["flaky"]}))])
            return Reply(text="PARENT retried")
        if not outs:
            return Reply(
                tool_calls=[
                    ToolCallReply("spawn_task", '{"input": "CHILD-FLAKY", "label": "flaky"}'),
                    ToolCallReply("spawn_task", '{"input": "CHILD-LONG", "label": "long"}'),
                ]
            )
        return Reply(text="PARENT spawned")

    ids: dict[str, str] = {}
    tm.mesh.emu.responder = respond
    started = await start(tm, "PARENT go")
    await tm.wait_run(started.run_id, cpb.RUN_STATUS_COMPLETED)
    for t in (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=started.session_id))).tasks:
        ids[t.label] = t.task_id
    await tm.wait_task(ids["flaky"], pb.TASK_STATUS_FAILED)
    await until(lambda: asyncio.sleep(0, asked.is_set()), bool, "the long task's model call")
    retry = await tm.mesh.runs.StartRun(
        rpb.StartRunRequest(agent_name="lead", input="PARENT-RETRY", session_id=started.session_id)
    )
    await tm.wait_run(retry.run_id, cpb.RUN_STATUS_COMPLETED)
    stop = await tm.mesh.runs.StartRun(
        rpb.StartRunRequest(agent_name="lead", input="PARENT-STOP", session_id=started.session_id)
    )
    await tm.wait_run(stop.run_id, cpb.RUN_STATUS_COMPLETED)
    entries = await tm.mesh.entries(started.session_id)
    outputs = [e.item.tool_result.content for e in entries if e.item.HasField("tool_result")]
    assert any(o.startswith("retrying: attempt 2 of 3 started") for o in outputs), outputs
    assert any(o.startswith("stopped: the task is canceled") for o in outputs), outputs
    assert (await tm.wait_task(ids["flaky"], pb.TASK_STATUS_COMPLETED)).attempt == 2
    assert (await tm.get(ids["long"])).status == pb.TASK_STATUS_CANCELED
    gate.set()
