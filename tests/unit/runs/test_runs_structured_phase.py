"""The loop's structured-output rules on a snapshot, without servers (runs/loop/phases/structured.py)."""

from __future__ import annotations

import json

from agentrt.core.decide import ProposedCall, Response, decide
from agentrt.core.structured import Kind, Strategy
from agentrt.runs.loop.phases.structured import judge_turn, preanswered, shape_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
READ = pb.AgentTool(name="read_file", spec=cpb.ToolSpec(name="read_file", parameters_json_schema="{}"))


def snap(provider: str = "openai", *, tools=(READ,), schema: str = SCHEMA, **kw) -> pb.AgentSpec:
    return pb.AgentSpec(
        model=cpb.ModelRef(provider=provider, model="m"), tools=list(tools), output_json_schema=schema, **kw
    )


def calls(*pairs: tuple[str, str]):
    return decide(Response(calls=[ProposedCall(n, a) for n, a in pairs], stop_reason="tool_use"))


def test_the_turn_shape_follows_the_provider_and_the_strategy():
    tool = shape_of(snap("openai"))
    assert tool.strategy == Strategy.TOOL and [t.name for t in tool.tools] == ["read_file", "final_output"]
    assert tool.response_format == ""
    native = shape_of(snap("anthropic"))
    assert native.strategy == Strategy.NATIVE and native.response_format == SCHEMA
    assert [t.name for t in native.tools] == ["read_file"]
    forced = shape_of(snap("anthropic", output_strategy=pb.OUTPUT_STRATEGY_TOOL))
    assert forced.strategy == Strategy.TOOL
    assert shape_of(snap("openai", tools=())).strategy == Strategy.NATIVE  # nothing to mix with
    plain = shape_of(snap("openai", schema=""))
    assert plain.strategy is None and [t.name for t in plain.tools] == ["read_file"]


def test_a_tool_free_turn_is_native_and_offers_nothing_callable():
    openai = shape_of(snap("openai"), tool_free=True)
    assert openai.tools == [] and openai.response_format == SCHEMA and openai.tool_free
    anthropic = shape_of(snap("anthropic"), tool_free=True)
    assert [t.name for t in anthropic.tools] == ["read_file"] and anthropic.tool_free


def test_a_lone_final_output_call_is_judged_and_answered():
    shape = shape_of(snap("openai"))
    ok = judge_turn(snap(), shape, calls(("final_output", '{"n": 1}')), recovery_used=False)
    assert ok is not None and ok.kind == Kind.FINAL and json.loads(ok.output) == {"n": 1}
    assert [r.content for r in ok.results] == ["Final output accepted."]
    bad = judge_turn(snap(), shape, calls(("final_output", '{"n": "x"}')), recovery_used=False)
    assert bad is not None and bad.kind == Kind.RECOVER and "/n" in bad.results[0].content
    failed = judge_turn(snap(), shape, calls(("final_output", '{"n": "x"}')), recovery_used=True)
    assert failed is not None and failed.kind == Kind.FAIL and failed.failure_details["pointer"] == "/n"
    twice = judge_turn(
        snap(), shape, calls(("final_output", '{"n": 1}'), ("final_output", '{"n": 2}')), recovery_used=False
    )
    assert twice is not None and twice.output == '{"n": 1}' and len(twice.results) == 2
    assert twice.results[1].content.startswith("Ignored")


def test_final_output_mixed_with_other_calls_is_answered_and_the_turn_goes_on():
    shape = shape_of(snap("openai"))
    mixed = calls(("read_file", '{"path": "a"}'), ("final_output", '{"n": 1}'))
    assert judge_turn(snap(), shape, mixed, recovery_used=False) is None
    answered = preanswered(shape, mixed)
    assert list(answered) == [mixed.calls[1].call_id] and answered[mixed.calls[1].call_id].is_error


def test_text_answers_are_judged_only_with_a_schema():
    text = decide(Response(text="not json", stop_reason="end_turn"))
    plain = judge_turn(snap(schema=""), shape_of(snap(schema="")), text, recovery_used=False)
    assert plain is not None and plain.output == "not json"
    recover = judge_turn(snap("anthropic"), shape_of(snap("anthropic")), text, recovery_used=False)
    assert recover is not None and recover.kind == Kind.RECOVER and recover.results == []
    assert "not valid JSON" in recover.recovery_text
    empty = decide(Response(text="", stop_reason="end_turn"))
    assert judge_turn(snap(), shape_of(snap()), empty, recovery_used=False) is None  # continues
