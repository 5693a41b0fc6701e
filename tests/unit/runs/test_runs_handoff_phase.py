"""The loop's handoff rules on a snapshot, without servers (runs/loop/phases/handoff.py)."""

from __future__ import annotations

import json

import pytest

from agentrt.core.decide import ProposedCall, Response, decide
from agentrt.runs.loop.phases import handoff as handoff_phase
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


def snap(name: str = "triage", **kw) -> pb.AgentSpec:
    return pb.AgentSpec(name=name, model=cpb.ModelRef(provider="openai", model="m"), **kw)


def calls(*pairs: tuple[str, str]):
    return decide(Response(calls=[ProposedCall(n, a) for n, a in pairs], stop_reason="tool_use"))


def test_the_first_handoff_wins_and_the_others_are_answered_ignored():
    spec = snap(handoffs=["billing", "support"])
    decision = calls(("read_file", "{}"), ("transfer_to_support", "{}"), ("transfer_to_billing", "{}"))
    plan = handoff_phase.plan(spec, decision)
    assert plan is not None and plan.target.agent_name == "support"
    first, second = decision.calls[1], decision.calls[2]
    assert list(plan.answered) == [first.call_id, second.call_id]  # the regular call is not answered
    assert plan.answered[first.call_id].content.startswith('{"assistant": "support"}')
    assert plan.answered[second.call_id].status == cpb.TOOL_RESULT_STATUS_NOT_EXECUTED
    assert handoff_phase.plan(spec, calls(("read_file", "{}"))) is None


def test_handoff_input_is_checked_against_its_schema():
    schema = json.dumps({"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]})
    spec = snap(handoff_targets=[pb.Handoff(agent_name="billing", input_json_schema=schema)])
    assert handoff_phase.plan(spec, calls(("transfer_to_billing", '{"why": "invoice"}'))) is not None
    with pytest.raises(handoff_phase.HandoffFailed) as info:
        handoff_phase.plan(spec, calls(("transfer_to_billing", '{"why": 3}')))
    assert info.value.failure.kind == "invalid_handoff_input"
    assert json.loads(info.value.failure.details_json)["pointer"] == "/why"


def test_the_current_agent_and_its_offered_handoffs_survive_in_state():
    target = snap(name="billing")
    plan = handoff_phase.plan(snap(handoffs=["billing"]), calls(("transfer_to_billing", "{}")))
    assert plan is not None
    state = handoff_phase.switched_state(target, plan.call, None, 7)
    assert handoff_phase.current_agent(state, snap()).name == "billing"
    assert handoff_phase.current_agent({}, snap()).name == "triage"
    assert handoff_phase.handoff_seq(state) == 7
    assert [t.name for t in handoff_phase.offered(snap(handoffs=["billing"]))] == ["transfer_to_billing"]
