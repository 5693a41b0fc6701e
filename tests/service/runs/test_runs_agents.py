"""Agents, listing, idempotency, injected input, sessions shared by runs."""

from __future__ import annotations

import json

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent


async def test_register_versions_and_start_by_name(mesh):
    v1 = (
        await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="helper", instructions="one")))
    ).agent
    v2 = (
        await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="helper", instructions="two")))
    ).agent
    assert (v1.version, v2.version) == (1, 2)
    latest = (await mesh.runs.GetAgent(pb.GetAgentRequest(name="helper"))).agent
    first = (await mesh.runs.GetAgent(pb.GetAgentRequest(name="helper", version=1))).agent
    assert (latest.instructions, first.instructions) == ("two", "one")

    mesh.emu.script([Reply(text="hi from v1")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="helper", agent_version=1, input="x"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert (run.agent_name, run.agent_version) == ("helper", 1)
    body = json.dumps(mesh.emu.requests[-1][1])
    assert '"one"' in body or "one" in body  # the snapshot's instructions reached the model


async def test_list_runs_newest_first_with_pages(mesh):
    ids = []
    for i in range(3):
        mesh.emu.script([Reply(text=f"answer {i}")])
        started = await mesh.runs.StartRun(
            pb.StartRunRequest(agent=agent(), input=f"q{i}", labels={"n": str(i)})
        )
        await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
        ids.append(started.run_id)
    page1 = await mesh.runs.ListRuns(pb.ListRunsRequest(page_size=2))
    assert [r.run_id for r in page1.runs] == [ids[2], ids[1]] and page1.next_page_token
    page2 = await mesh.runs.ListRuns(pb.ListRunsRequest(page_size=2, page_token=page1.next_page_token))
    assert [r.run_id for r in page2.runs] == [ids[0]] and not page2.next_page_token
    assert page2.runs[0].labels == {"n": "0"}


async def test_idempotency_key_returns_the_same_run(mesh):
    mesh.emu.script([Reply(text="once")])
    req = pb.StartRunRequest(agent=agent(), input="x", idempotency_key="order-42")
    a = await mesh.runs.StartRun(req)
    b = await mesh.runs.StartRun(req)
    assert (a.run_id, a.session_id) == (b.run_id, b.session_id)
    await mesh.wait_status(a.run_id, cpb.RUN_STATUS_COMPLETED)
    assert len((await mesh.runs.ListRuns(pb.ListRunsRequest())).runs) == 1


async def suspended_run(mesh, replies):
    mesh.emu.script(replies)
    spec = agent(tools=[pb.AgentTool(name="list_files", needs_approval=True)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="start"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    return started, run.pending_calls[0].call


async def approve(mesh, run_id, call):
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=run_id, decisions=[pb.ApprovalDecision(call_id=call.call_id, approved=True)]
        )
    )


async def test_next_turn_input_lands_at_the_save_point(mesh):
    started, call = await suspended_run(
        mesh, [Reply(tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="ok")]
    )
    pos = await mesh.runs.InjectInput(
        pb.InjectInputRequest(
            run_id=started.run_id, text="also mention the time", kind=pb.INJECTION_KIND_NEXT_TURN
        )
    )
    assert pos.position == 1
    await approve(mesh, started.run_id, call)
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    entries = await mesh.entries(started.session_id)
    texts = [
        e.item.message.content[0].text.text
        for e in entries
        if e.item.HasField("message") and e.item.message.role == cpb.ROLE_USER
    ]
    assert texts == ["start", "also mention the time"]
    last = json.dumps(mesh.emu.requests[-1][1])
    assert "also mention the time" in last


async def test_follow_up_extends_a_finishing_run(mesh):
    started, call = await suspended_run(
        mesh,
        [Reply(tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="first"), Reply(text="second")],
    )
    await mesh.runs.InjectInput(
        pb.InjectInputRequest(run_id=started.run_id, text="and now shorter", kind=pb.INJECTION_KIND_FOLLOW_UP)
    )
    await approve(mesh, started.run_id, call)
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "second" and run.turns == 3


async def test_a_session_runs_one_run_at_a_time(mesh):
    started, _ = await suspended_run(mesh, [Reply(tool_calls=[ToolCallReply("list_files", "{}")])])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="x", session_id=started.session_id))
    assert (
        info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and reason_of(info.value) == "SESSION_BUSY"
    )
