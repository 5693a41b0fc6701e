"""Cancel during a multi-tool turn, and a run failing in its tool phase (issue 10).

Every committed call gets exactly one result in the session, persisted before the
terminal event: A (finished) its real output, B (running) "cancelled while running:
partial effects possible", C (not started) "not executed: run cancelled". On SQLite and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os

import grpc

from agentrt.core.decide import mint_call_id
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent


def _call(cmd: str) -> ToolCallReply:
    return ToolCallReply("exec_command", json.dumps({"cmd": cmd}))


async def _until(predicate, what: str) -> None:
    async def poll() -> None:
        while not await predicate():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), WAIT_S)
    except TimeoutError as exc:
        raise AssertionError(f"timed out waiting for {what}") from exc


def _results(entries) -> dict[str, cpb.ToolResult]:
    out: dict[str, cpb.ToolResult] = {}
    for e in entries:
        if e.item.HasField("tool_result"):
            assert e.item.tool_result.call_id not in out, "a call has two results"
            out[e.item.tool_result.call_id] = e.item.tool_result
    return out


async def test_cancel_mid_batch_gives_every_committed_call_one_result(store_mesh):
    mesh = store_mesh
    workspace = os.path.join(mesh.work, "cancel")
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    _call("echo a >> side.txt; echo done-a"),
                    _call("echo b-start >> side.txt; sleep 60; echo b-end >> side.txt"),
                    _call("echo c >> side.txt"),
                ]
            ),
            Reply(text="never reached"),
        ]
    )
    spec = agent(limits=pb.AgentLimits(max_tool_concurrency=1))
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=spec, input="three steps", workspace=workspace)
    )
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))
    b_id = mint_call_id(started.run_id, 1, 1)

    async def b_running() -> bool:
        got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=b_id))
        return got.state == tpb.EXECUTION_STATE_STARTED

    await _until(b_running, "call B to run")
    cancelled = (await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="stop"))).run
    assert cancelled.status == cpb.RUN_STATUS_CANCELED

    entries = await mesh.entries(started.session_id)
    calls = [e.item.tool_call for e in entries if e.item.HasField("tool_call")]
    assert [c.call_id for c in calls] == [mint_call_id(started.run_id, 1, i) for i in range(3)]
    results = _results(entries)
    a, b, c = (results[mint_call_id(started.run_id, 1, i)] for i in range(3))
    assert a.status == cpb.TOOL_RESULT_STATUS_OK and a.content == "done-a\n"
    assert b.status == cpb.TOOL_RESULT_STATUS_INTERRUPTED and b.is_error
    assert b.content.startswith("Cancelled while running: partial effects possible")
    assert c.status == cpb.TOOL_RESULT_STATUS_NOT_EXECUTED
    assert c.content.startswith("Not executed: run cancelled")
    # B was killed by the cancel (it may or may not have written its first line), C never ran
    with open(os.path.join(workspace, "side.txt")) as f:
        assert f.read() in ("a\n", "a\nb-start\n")
    # the batch reached the session before the terminal event
    events = await mesh.events(started.run_id)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.index("items_persisted", kinds.index("tool_called")) < kinds.index("run_completed")
    returned = [e.tool_returned.result.call_id for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert sorted(returned) == sorted(c.call_id for c in calls)
    assert len(mesh.emu.requests) == 1  # the model was not asked again


async def test_a_run_failing_in_its_tool_phase_answers_every_announced_call(store_mesh, tmp_path):
    """A failing tool phase still gives each tool_called its tool_returned and each call a result."""
    mesh = store_mesh
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    mesh.emu.script(
        [Reply(tool_calls=[_call("echo one"), ToolCallReply("list_files", "{}")]), Reply(text="never")]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace=str(not_a_dir / "ws"))
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "invalid_workspace"
    events = await mesh.events(started.run_id)
    called = [e.tool_called.call.call_id for e in events if e.WhichOneof("payload") == "tool_called"]
    returned = [e.tool_returned.result.call_id for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert len(called) == 2 and sorted(returned) == sorted(called)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.index("items_persisted", kinds.index("tool_called")) < kinds.index("run_completed")
    entries = await mesh.entries(started.session_id)
    calls = [e.item.tool_call.call_id for e in entries if e.item.HasField("tool_call")]
    results = _results(entries)
    assert sorted(calls) == sorted(called) and sorted(results) == sorted(called)
    assert all(r.is_error for r in results.values())
