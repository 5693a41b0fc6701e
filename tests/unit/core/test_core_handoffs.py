"""Handoffs (core/handoffs.py): resolution of a scripted response, the acknowledgement, input, filters."""

from __future__ import annotations

import json

import pytest

from agentrt.core import render
from agentrt.core.decide import STOP_TOOL_USE, Call, DecisionKind, ProposedCall, Response, decide
from agentrt.core.handoffs import (
    MAX_TOOL_NAME,
    NON_NULL_TEXT,
    HandoffInputError,
    InputFilter,
    Target,
    acknowledgement,
    check_input,
    default_tool_name,
    filter_history,
    ignored_text,
    resolve,
    tool_parameters,
)
from agentrt.core.render import Observation, Step, UserTurn
from agentrt.runs.spec.schemas import validator

TARGETS = {
    "transfer_to_billing": Target("transfer_to_billing", "billing"),
    "transfer_to_support": Target("transfer_to_support", "support", 2),
}


def scripted(*names: str) -> tuple[Call, ...]:
    """The calls of one scripted model response, through decide() as the loop gets them."""
    response = Response(calls=[ProposedCall(n, "{}") for n in names], stop_reason=STOP_TOOL_USE)
    decision = decide(response, call_id=lambda i: f"call_{i}")
    assert decision.kind == DecisionKind.TOOL_CALLS
    return decision.calls


def test_regular_tools_run_first_and_the_first_handoff_wins():
    calls = scripted("read_file", "transfer_to_support", "list_files", "transfer_to_billing")
    r = resolve(calls, TARGETS)
    assert [c.name for c in r.regular] == ["read_file", "list_files"]  # call order kept
    assert r.handoff is not None and r.handoff.call_id == "call_1"
    assert r.target == TARGETS["transfer_to_support"] and r.target.agent_version == 2
    assert [c.call_id for c in r.ignored] == ["call_3"]
    assert "support" in ignored_text(r.target.agent_name)


def test_a_response_without_handoffs_is_all_regular():
    calls = scripted("read_file", "write_file")
    r = resolve(calls, TARGETS)
    assert (r.regular, r.handoff, r.target, r.ignored) == (calls, None, None, ())


def test_the_acknowledgement_is_the_marker_then_an_identity_line():
    marker, identity = acknowledgement("billing").split("\n")
    assert json.loads(marker) == {"assistant": "billing"}
    assert "you are now the agent billing" in identity


def test_default_tool_names_are_tool_names():
    assert default_tool_name("billing.v2") == "transfer_to_billing_v2"
    long = default_tool_name("a" * 64)
    assert len(long) == MAX_TOOL_NAME and long.startswith("transfer_to_a")


def test_input_is_an_object_and_absent_reads_as_empty():
    assert check_input("", None, None) == {}
    assert check_input("null", None, None) == {}
    assert check_input(' {"why": "bill"} ', None, None) == {"why": "bill"}
    for text, error in (
        ("5", "must be a JSON object, not int"),
        ("[1]", "not list"),
        ("{", "not valid JSON"),
    ):
        with pytest.raises(HandoffInputError) as info:
            check_input(text, None, None)
        assert error in info.value.error and info.value.pointer == ""


def test_input_against_the_whole_schema_with_pointers():
    schema = {
        "type": "object",
        "properties": {
            "ticket": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
        },
        "required": ["ticket"],
    }
    check = validator(json.dumps(schema))
    with pytest.raises(HandoffInputError) as info:
        check_input("", schema, check)
    assert info.value.error == NON_NULL_TEXT
    with pytest.raises(HandoffInputError) as info:
        check_input('{"ticket": {"id": "seven"}}', schema, check)
    assert (info.value.pointer, info.value.error) == ("/ticket/id", "'seven' is not of type 'integer'")
    # defaults are not applied to handoff input: the value is the model's own
    with_default = {"type": "object", "properties": {"why": {"type": "string", "default": "x"}}}
    assert check_input("{}", with_default, validator(json.dumps(with_default))) == {}
    # a schema that cannot be compiled keeps the rules that need none
    assert check_input("{}", {"type": "objekt"}, validator('{"type": "objekt"}')) == {}
    with pytest.raises(HandoffInputError):
        check_input("3", {"type": "objekt"}, None)


def test_tool_parameters_default_to_an_empty_object():
    assert tool_parameters(TARGETS["transfer_to_billing"]) == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


def step(kind: DecisionKind, *calls: Call, text: str = "", results: dict[str, str] | None = None) -> Step:
    obs = {k: Observation(v) for k, v in (results or {}).items()}
    final = text if kind == DecisionKind.FINAL else ""
    return Step(kind, text, final, calls, obs)


def c(call_id: str, name: str) -> Call:
    return Call(0, call_id, name, "{}")


def conversation() -> list[UserTurn | Step]:
    return [
        UserTurn("first question"),
        step(DecisionKind.TOOL_CALLS, c("a1", "read_file"), text="reading", results={"a1": "file text"}),
        step(DecisionKind.FINAL, text="first answer"),
        UserTurn("I want a refund"),
        step(
            DecisionKind.TOOL_CALLS,
            c("b1", "list_files"),
            c("b2", "transfer_to_billing"),
            results={"b1": "a.txt", "b2": acknowledgement("billing")},
        ),
        # written after the handoff: the target's own turns, always shown whole
        step(DecisionKind.TOOL_CALLS, c("t1", "read_file"), results={"t1": "invoice"}),
    ]


def test_drop_tool_calls_keeps_the_handoff_call_and_the_conversation():
    history = conversation()
    seen = filter_history(history, 5, InputFilter(drop_tool_calls=True), "b2")
    assert [type(i).__name__ for i in seen] == ["UserTurn", "Step", "UserTurn", "Step", "Step"]
    handoff_step = seen[3]
    assert isinstance(handoff_step, Step) and [x.call_id for x in handoff_step.calls] == ["b2"]
    assert list(handoff_step.observations) == ["b2"]
    assert seen[4] is history[5]  # after the cut: untouched
    assert history[4].calls[0].call_id == "b1"  # the session's view is not changed
    rendered = render.messages(seen)
    results = [b for m in rendered for b in m.blocks if isinstance(b, render.ToolResultBlock)]
    assert [r.call_id for r in results] == ["b2", "t1"]
    assert json.loads(results[0].content.split("\n")[0]) == {"assistant": "billing"}


def test_keep_last_turns_opens_with_the_user_input_that_led_to_them():
    history = conversation()
    seen = filter_history(history, 5, InputFilter(keep_last_turns=1), "b2")
    assert seen == [history[3], history[4], history[5]]
    seen = filter_history(history, 5, InputFilter(keep_last_turns=2), "b2")
    assert seen == [history[0], history[2], history[3], history[4], history[5]]
    both = filter_history(history, 5, InputFilter(drop_tool_calls=True, keep_last_turns=2), "b2")
    assert [type(i).__name__ for i in both] == ["UserTurn", "Step", "UserTurn", "Step", "Step"]
    assert render.messages(both)[0].blocks[0] == render.TextBlock("first question")


def test_an_identity_filter_changes_nothing():
    history = conversation()
    assert filter_history(history, 5, InputFilter(), "b2") == history
    assert filter_history(history, 99, InputFilter(keep_last_turns=100), "b2") == history
