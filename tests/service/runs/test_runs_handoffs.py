"""Handoffs over the real mesh on both providers (004 §2.4, §2.2 step 8)."""

from __future__ import annotations

import json

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

PROVIDERS = ["openai", "anthropic"]
TRIAGE_SAYS, BILLING_SAYS = "You are triage: route the user.", "You are billing: answer invoices."


def model_requests(mesh) -> list[dict]:
    return [body for path, body in mesh.emu.requests if path.endswith(("/responses", "/messages"))]


def tool_names(body: dict) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or []]


def instructions(body: dict) -> str:
    system = body.get("instructions", body.get("system", ""))
    return system if isinstance(system, str) else json.dumps(system)


async def register_pair(mesh, provider: str, **handoff_kw) -> None:
    billing = agent(
        provider, name="billing", instructions=BILLING_SAYS, tools=[pb.AgentTool(name="list_files")]
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=billing))
    target = pb.Handoff(agent_name="billing", **handoff_kw)
    triage = agent(
        provider,
        name="triage",
        instructions=TRIAGE_SAYS,
        tools=[pb.AgentTool(name="read_file")],
        handoff_targets=[target],
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=triage))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_handoff_gives_the_next_turn_to_the_target(mesh, provider):
    await register_pair(mesh, provider)
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("read_file", '{"path": "missing.txt"}'),
                    ToolCallReply("transfer_to_billing", "{}"),
                    ToolCallReply("transfer_to_billing", '{"again": true}'),
                ]
            ),
            Reply(text="Billing here: your invoice is paid."),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="triage", input="my invoice?"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "Billing here: your invoice is paid." and run.turns == 2
    assert (run.agent_name, run.current_agent_name) == ("triage", "billing")

    first, second = model_requests(mesh)
    assert TRIAGE_SAYS in instructions(first) and tool_names(first) == ["read_file", "transfer_to_billing"]
    assert BILLING_SAYS in instructions(second) and tool_names(second) == ["list_files"]
    assert '{\\"assistant\\": \\"billing\\"}' in json.dumps(second)  # the acknowledgement marker
    assert "you are now the agent billing" in json.dumps(second)

    entries = await mesh.entries(started.session_id)
    by_turn = {(e.turn, e.item.agent) for e in entries if e.item.agent}
    assert {(1, "triage"), (2, "billing")} <= by_turn  # both agents' turns, one session
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert [r.name for r in results] == ["read_file", "transfer_to_billing", "transfer_to_billing"]
    assert results[2].status == cpb.TOOL_RESULT_STATUS_NOT_EXECUTED and "not performed" in results[2].content

    events = await mesh.events(started.run_id)
    called = [e.tool_called for e in events if e.WhichOneof("payload") == "tool_called"]
    assert [c.handoff for c in called] == [False, True, True]
    returned = [e.tool_returned.result.name for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert returned == ["read_file"]  # a handoff call has no paired output
    kinds = [e.WhichOneof("payload") for e in events]
    handed = [e.handoff_requested for e in events if e.WhichOneof("payload") == "handoff_requested"]
    assert len(handed) == 1 and (handed[0].from_agent, handed[0].to_agent) == ("triage", "billing")
    assert handed[0].ignored_call_ids == [called[2].call.call_id]
    assert kinds.index("tool_returned") < kinds.index("handoff_requested")  # regular tools ran first


async def test_an_input_filter_changes_what_the_target_sees_not_the_session(mesh):
    await register_pair(mesh, "openai", input_filter=pb.HandoffInputFilter(drop_tool_calls=True))
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("read_file", '{"path": "secret.txt"}')]),
            Reply(tool_calls=[ToolCallReply("transfer_to_billing", "{}")]),
            Reply(text="done"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="triage", input="hi"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    seen = json.dumps(model_requests(mesh)[2])
    assert "secret.txt" not in seen and "billing" in seen  # the earlier tool step is dropped
    kept = [
        e.item.tool_call.name for e in await mesh.entries(started.session_id) if e.item.HasField("tool_call")
    ]
    assert kept == ["read_file", "transfer_to_billing"]  # the session keeps everything


async def test_max_turns_keeps_counting_across_a_handoff(mesh):
    billing = agent(name="billing", tools=[pb.AgentTool(name="list_files")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=billing))
    triage = agent(name="triage", tools=[], handoffs=["billing"], limits=pb.AgentLimits(max_turns=2))
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("transfer_to_billing", "{}")]),
            Reply(tool_calls=[ToolCallReply("list_files", "{}")]),
            Reply(text="never asked"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=triage, input="hi"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "max_turns"
    assert len(model_requests(mesh)) == 2


async def test_a_handoff_input_that_is_not_an_object_fails_the_run(mesh):
    await register_pair(mesh, "anthropic")
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("transfer_to_billing", "[1, 2]")])])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="triage", input="hi"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "invalid_handoff_input"


async def test_a_handoff_is_a_span_under_its_turn(start_server, tmp_path, emulator):
    from tests.service.runs.harness import start_mesh
    from tests.tracing import recorded

    with recorded() as rec:
        mesh = await start_mesh(start_server, tmp_path, emulator)
        await register_pair(mesh, "openai")
        mesh.emu.script([Reply(tool_calls=[ToolCallReply("transfer_to_billing", "{}")]), Reply(text="paid")])
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="triage", input="my invoice?"))
        run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        span = rec.named("handoff billing")
        attrs = dict(span.attributes or {})
        assert (attrs["agentrt.handoff.from_agent"], attrs["agentrt.handoff.to_agent"]) == (
            "triage",
            "billing",
        )
        assert attrs["agentrt.run.id"] == started.run_id and attrs["gen_ai.tool.call.id"]
        assert attrs["agentrt.handoff.to_agent_version"] == 1
        parent = next(s for s in rec.spans if span.parent and s.context.span_id == span.parent.span_id)
        assert parent.name == "turn 1"
