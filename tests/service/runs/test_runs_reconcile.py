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
from tests.service.runs.harness import agent
from tests.service.runs.test_runs_takeover import until

#: Appends a line each time it runs; the first run then blocks until it is killed.
ONCE_THEN_BLOCK = "echo ran >> lines.txt; test -e marker || { touch marker; sleep 60; }; echo finished"


async def test_a_side_effect_interrupted_by_the_tool_service_waits_for_a_reconciliation(
    start_server, tmp_path, emulator
):
    from tests.service.runs.harness import start_mesh

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
    assert (
        await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))
    ).run.status == cpb.RUN_STATUS_SUSPENDED

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
