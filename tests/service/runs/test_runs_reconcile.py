"""Interrupted side effects wait for a reconciliation (issue 9; seed 000 "Interruption").

The tool service stops while a call with side effects runs (its journal closes the call
as interrupted: the outcome is unknown). The run then never sends the model a re-request:
it suspends with the call pending as a reconciliation, and ResumeRun answers it. Answered
"run it again", the command runs exactly once more (a new execution attempt).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import grpc
import pytest

from agentrt.core.decide import mint_call_id
from agentrt.mesh.status import reason_of
from agentrt.tools.server import build_server as build_tools
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import Mesh, agent, start_mesh
from tests.service.runs.test_runs_takeover import until

#: Appends a line each time it runs; the first run then blocks until it is killed.
ONCE_THEN_BLOCK = "echo ran >> lines.txt; test -e marker || { touch marker; sleep 60; }; echo finished"


def once_then_block(i: int) -> str:
    """Append a line to lines<i>.txt each run; the first run then blocks until it is killed."""
    return (
        f"echo ran >> lines{i}.txt; test -e marker{i} || {{ touch marker{i}; sleep 60; }}; echo finished {i}"
    )


async def waiting_for_reconciliations(
    start_server, tmp_path, emulator, n: int
) -> tuple[Mesh, str, str, list[str]]:
    """A mesh and a run suspended with n exec_command calls waiting for a reconciliation.

    Returns (mesh, run id, the run's workspace, the call ids in call order).
    """
    mesh = await start_mesh(start_server, tmp_path, emulator)
    workspace = os.path.join(mesh.work, "reconcile")
    calls = [ToolCallReply("exec_command", json.dumps({"cmd": once_then_block(i)})) for i in range(n)]
    emulator.script([Reply(tool_calls=calls), Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=workspace))
    call_ids = [mint_call_id(started.run_id, 1, i) for i in range(n)]
    tools_address = mesh.addresses["tools"]
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(tools_address))

    async def all_running() -> bool:
        for i, call_id in enumerate(call_ids):
            got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
            if got.state != tpb.EXECUTION_STATE_STARTED or not os.path.exists(
                os.path.join(workspace, f"marker{i}")
            ):
                return False
        return True

    await until(all_running, "the commands to run")
    # the tool service stops while they run (it journals them interrupted), and comes back
    await mesh.tools_server.stop(grace=0)
    port = int(tools_address.rsplit(":", 1)[1])
    config = mesh.tools_config
    await start_server(build_tools(replace(config, server=replace(config.server, port=port))))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert [p.kind for p in run.pending_calls] == [pb.PENDING_CALL_KIND_RECONCILIATION] * n
    assert [p.call.call_id for p in run.pending_calls] == call_ids
    return mesh, started.run_id, workspace, call_ids


def lines_of(workspace: str, i: int) -> str:
    with open(os.path.join(workspace, f"lines{i}.txt")) as f:
        return f.read()


async def test_a_side_effect_interrupted_by_the_tool_service_waits_for_a_reconciliation(
    start_server, tmp_path, emulator
):
    mesh = await start_mesh(start_server, tmp_path, emulator)
    workspace = os.path.join(mesh.work, "reconcile")
    emulator.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": ONCE_THEN_BLOCK}))]),
            Reply(text="done"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=workspace))
    tools_address = mesh.addresses["tools"]
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(tools_address))
    call_id = mint_call_id(started.run_id, 1, 0)

    async def running() -> bool:
        got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED and os.path.exists(os.path.join(workspace, "marker"))

    await until(running, "the command to run")
    # the tool service stops while the command runs; it journals the call interrupted
    await mesh.tools_server.stop(grace=0)
    port = int(tools_address.rsplit(":", 1)[1])
    config = mesh.tools_config
    await start_server(build_tools(replace(config, server=replace(config.server, port=port))))

    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert run.suspension_reason == pb.SUSPENSION_REASON_RECONCILIATION
    assert [p.kind for p in run.pending_calls] == [pb.PENDING_CALL_KIND_RECONCILIATION]
    assert run.pending_calls[0].call.call_id == call_id and run.pending_calls[0].reason
    assert len(emulator.requests) == 1  # the model was not told to request it again
    events = await mesh.events(started.run_id, until="run_suspended")
    assert events[-1].run_suspended.reason == pb.SUSPENSION_REASON_RECONCILIATION

    # bad answers change nothing
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(run_id=started.run_id, reconciliations=[pb.Reconciliation(call_id=call_id)])
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(info.value) == "INVALID_VALUE"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(
                run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
            )
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(
                run_id=started.run_id,
                reconciliations=[
                    pb.Reconciliation(call_id=call_id, action=pb.RECONCILIATION_ACTION_SUPPLY_RESULT)
                ],
            )
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # what the session could not store is refused as a client's result is (it was accepted)
    too_long = "x" * (2 * 1024 * 1024 + 1)
    for rec, reason in (
        (pb.Reconciliation(action=pb.RECONCILIATION_ACTION_FAIL, message=too_long), "REQUEST_TOO_LARGE"),
        (
            pb.Reconciliation(
                action=pb.RECONCILIATION_ACTION_SUPPLY_RESULT, result=cpb.ToolResult(content=too_long)
            ),
            "REQUEST_TOO_LARGE",
        ),
        (
            pb.Reconciliation(
                action=pb.RECONCILIATION_ACTION_SUPPLY_RESULT, result=cpb.ToolResult(status=99)
            ),
            "INVALID_VALUE",
        ),
    ):
        rec.call_id = call_id
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, reconciliations=[rec]))
        assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED and [p.call.call_id for p in run.pending_calls] == [call_id]

    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id,
            reconciliations=[pb.Reconciliation(call_id=call_id, action=pb.RECONCILIATION_ACTION_RUN_AGAIN)],
        )
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.suspension_reason == pb.SUSPENSION_REASON_UNSPECIFIED
    with open(os.path.join(workspace, "lines.txt")) as f:
        assert f.read() == "ran\nran\n"  # exactly once more
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert len(results) == 1 and results[0].content == "finished\n"
    assert "finished" in json.dumps(emulator.requests[-1][1])


async def test_run_again_given_before_the_last_answer_still_runs_the_call_again(
    start_server, tmp_path, emulator
):
    # Answers may come one ResumeRun at a time (an operator answers call by call); a
    # RUN_AGAIN that is not the last answer used to be forgotten: the call kept its first
    # attempt, the tool service's journal handed back the interruption, and the model read it.
    mesh, run_id, workspace, (again, failed) = await waiting_for_reconciliations(
        start_server, tmp_path, emulator, 2
    )
    run_again = pb.Reconciliation(call_id=again, action=pb.RECONCILIATION_ACTION_RUN_AGAIN)
    resp = await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run_id, reconciliations=[run_again]))
    assert resp.run.status == cpb.RUN_STATUS_SUSPENDED
    assert [p.call.call_id for p in resp.run.pending_calls] == [failed]
    fail = pb.Reconciliation(call_id=failed, action=pb.RECONCILIATION_ACTION_FAIL, message="rolled back")
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run_id, reconciliations=[fail]))
    run = await mesh.wait_status(run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert lines_of(workspace, 0) == "ran\nran\n"  # exactly once more
    assert lines_of(workspace, 1) == "ran\n"
    results = {
        e.item.tool_result.call_id: e.item.tool_result
        for e in await mesh.entries(run.session_id)
        if e.item.HasField("tool_result")
    }
    assert results[again].content == "finished 0\n" and results[again].status == cpb.TOOL_RESULT_STATUS_OK
    assert "rolled back" in results[failed].content
