"""Approval pauses the whole turn; ResumeRun approves or denies; client-declared tools."""

from __future__ import annotations

import json
import os

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent


def gated_agent(**kw):
    tools = [pb.AgentTool(name="exec_command", needs_approval=True), pb.AgentTool(name="write_file")]
    return agent(tools=tools, **kw)


async def start_gated(mesh, name="a.txt"):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("write_file", json.dumps({"path": "w.txt", "content": "w"})),
                    ToolCallReply("exec_command", json.dumps({"cmd": f"echo x > {name}"})),
                ]
            ),
            Reply(text="finished"),
        ]
    )
    workspace = os.path.join(mesh.work, "gated")
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=gated_agent(), input="go", workspace=workspace)
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    return started, run, workspace


async def test_approval_pauses_the_whole_turn_then_approve_runs_it(mesh):
    started, run, workspace = await start_gated(mesh)
    assert [p.kind for p in run.pending_calls] == [pb.PENDING_CALL_KIND_APPROVAL]
    pending = run.pending_calls[0].call
    assert pending.name == "exec_command" and json.loads(pending.arguments) == {"cmd": "echo x > a.txt"}
    # nothing ran: not even the call that needed no approval (004 §2.2 step 4)
    assert not os.path.exists(os.path.join(workspace, "w.txt"))
    assert len(await mesh.entries(started.session_id)) == 1  # the input only; the turn is held back

    resumed = await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=pending.call_id, approved=True)]
        )
    )
    assert resumed.run.status in (cpb.RUN_STATUS_RUNNING, cpb.RUN_STATUS_COMPLETED)
    events = await mesh.events(started.run_id)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.index("run_suspended") < kinds.index("run_resumed") < kinds.index("tool_called")
    assert events[-2].run_completed.status == cpb.RUN_STATUS_COMPLETED
    assert os.path.exists(os.path.join(workspace, "a.txt")) and os.path.exists(
        os.path.join(workspace, "w.txt")
    )
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert [r.status for r in results] == [cpb.TOOL_RESULT_STATUS_OK, cpb.TOOL_RESULT_STATUS_OK]

    # a finished run cannot be resumed
    try:
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(
                run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=pending.call_id, approved=True)]
            )
        )
        raise AssertionError("expected FAILED_PRECONDITION")
    except Exception as err:  # noqa: BLE001
        from agentrt.mesh.status import reason_of

        assert reason_of(err) == "RUN_FINISHED"


async def test_deny_answers_the_model_with_the_message(mesh):
    started, run, workspace = await start_gated(mesh, name="denied.txt")
    pending = run.pending_calls[0].call
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id,
            decisions=[pb.ApprovalDecision(call_id=pending.call_id, approved=False, message="not in prod")],
        )
    )
    final = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert final.final_output == "finished"
    assert not os.path.exists(os.path.join(workspace, "denied.txt"))
    assert os.path.exists(os.path.join(workspace, "w.txt"))  # the approved-by-policy sibling ran
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    denied = [r for r in results if r.call_id == pending.call_id][0]
    assert denied.status == cpb.TOOL_RESULT_STATUS_DENIED and "not in prod" in denied.content
    assert "not in prod" in json.dumps(mesh.emu.requests[-1][1])


async def test_resume_validates_answers(mesh):
    from agentrt.mesh.status import reason_of

    started, run, _ = await start_gated(mesh)
    pending = run.pending_calls[0].call
    bad = [
        pb.ResumeRunRequest(run_id=started.run_id),
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id="nope", approved=True)]
        ),
        pb.ResumeRunRequest(
            run_id=started.run_id, results=[cpb.ToolResult(call_id=pending.call_id, content="x")]
        ),
    ]
    for request, reason in zip(bad, ["MISSING_FIELD", "INVALID_VALUE", "INVALID_VALUE"], strict=True):
        try:
            await mesh.runs.ResumeRun(request)
            raise AssertionError("expected INVALID_ARGUMENT")
        except Exception as err:  # noqa: BLE001
            assert reason_of(err) == reason
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED and len(run.pending_calls) == 1  # nothing changed


async def test_external_tool_result_continues_the_run(mesh):
    lookup = cpb.ToolSpec(
        name="lookup_weather", description="Weather for a city", external=True,
        parameters_json_schema=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
    )  # fmt: skip
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("lookup_weather", '{"city": "Oslo"}')]),
            Reply(text="It is sunny in Oslo."),
        ]
    )
    spec = agent(tools=[pb.AgentTool(name="lookup_weather", spec=lookup)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="weather in Oslo?"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert [p.kind for p in run.pending_calls] == [pb.PENDING_CALL_KIND_EXTERNAL_RESULT]
    call = run.pending_calls[0].call
    assert call.arguments == '{"city": "Oslo"}'
    # the model was offered the client's tool
    assert "lookup_weather" in json.dumps(mesh.emu.requests[0][1])

    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, results=[cpb.ToolResult(call_id=call.call_id, content="sunny, 21C")]
        )
    )
    final = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert final.final_output == "It is sunny in Oslo."
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].content == "sunny, 21C" and results[0].name == "lookup_weather"
    assert "sunny, 21C" in json.dumps(mesh.emu.requests[-1][1])


async def test_an_answered_approval_leaves_pending_and_cannot_be_answered_again(mesh):
    """A denial stays a denial while a client result is still awaited (issue 11, step 0)."""
    from agentrt.mesh.status import reason_of

    lookup = cpb.ToolSpec(
        name="lookup_weather", description="Weather for a city", external=True,
        parameters_json_schema=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
    )  # fmt: skip
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", json.dumps({"cmd": "echo x > never.txt"})),
                    ToolCallReply("lookup_weather", '{"city": "Oslo"}'),
                ]
            ),
            Reply(text="done"),
        ]
    )
    spec = agent(
        tools=[
            pb.AgentTool(name="exec_command", needs_approval=True),
            pb.AgentTool(name="lookup_weather", spec=lookup),
        ]
    )
    workspace = os.path.join(mesh.work, "twice")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    by_kind = {p.kind: p.call for p in run.pending_calls}
    gated, client = by_kind[pb.PENDING_CALL_KIND_APPROVAL], by_kind[pb.PENDING_CALL_KIND_EXTERNAL_RESULT]

    deny = pb.ApprovalDecision(call_id=gated.call_id, approved=False, message="no")
    resumed = await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, decisions=[deny]))
    assert resumed.run.status == cpb.RUN_STATUS_SUSPENDED
    assert [p.call.call_id for p in resumed.run.pending_calls] == [client.call_id]  # answered: gone at once

    overturn = pb.ApprovalDecision(call_id=gated.call_id, approved=True)
    try:
        await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, decisions=[overturn]))
        raise AssertionError("expected INVALID_ARGUMENT")
    except Exception as err:  # noqa: BLE001
        assert reason_of(err) == "INVALID_VALUE"
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert [p.call.call_id for p in run.pending_calls] == [client.call_id]  # nothing changed

    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, results=[cpb.ToolResult(call_id=client.call_id, content="sunny")]
        )
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert not os.path.exists(os.path.join(workspace, "never.txt"))  # the denial held
    results = {
        e.item.tool_result.call_id: e.item.tool_result
        for e in await mesh.entries(started.session_id)
        if e.item.HasField("tool_result")
    }
    assert results[gated.call_id].status == cpb.TOOL_RESULT_STATUS_DENIED
