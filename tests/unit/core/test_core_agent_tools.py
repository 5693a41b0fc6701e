"""Agents as tools (core/agent_tools.py): the tool's input, the child's result, usage folding."""

from __future__ import annotations

import json

import pytest

from agentrt.core.agent_tools import (
    PARAMETERS,
    ChildInputError,
    RunUsage,
    Tokens,
    child_input,
    child_result,
)
from agentrt.runs.spec.schemas import validator


def test_the_tool_takes_an_input_string_checked_like_any_tool():
    assert child_input('{"input": "summarize the invoice"}') == "summarize the invoice"
    for bad in ("", "{}", '{"input": 3}', '{"input": "  "}', "[1]", "{"):
        with pytest.raises(ChildInputError):
            child_input(bad)
    check = validator(json.dumps(PARAMETERS))
    assert check is not None and check({"input": 3})[0].pointer == "/input"


def test_the_childs_ending_becomes_the_calls_result():
    assert child_result("completed", "42") == ("42", False)
    content, is_error = child_result("failed", "", "The run used its 10 turns without a final answer.")
    assert is_error and "10 turns" in content
    assert child_result("canceled", "")[1] is True


def test_a_child_is_folded_into_the_total_and_kept_apart_as_nested():
    parent = RunUsage().add_own(Tokens(input_tokens=100, output_tokens=20, requests=1))
    child = (
        RunUsage()
        .add_own(Tokens(input_tokens=50, output_tokens=10, requests=1))
        .add_nested(Tokens(input_tokens=5, output_tokens=1, requests=1))  # the child's own guardrail
    )
    folded = parent.fold_child(child)
    assert folded.total == Tokens(input_tokens=155, output_tokens=31, requests=3)
    assert folded.nested == Tokens(input_tokens=55, output_tokens=11, requests=2)
    # what counts as this conversation's context: total minus nested = the parent's own calls
    assert folded.total.input_tokens - folded.nested.input_tokens == 100
    tool_spend = folded.add_nested(Tokens(output_tokens=7, requests=1))  # ToolResult.nested_usage
    assert (tool_spend.total.output_tokens, tool_spend.nested.output_tokens) == (38, 18)


def test_usage_round_trips_through_the_run_log():
    usage = RunUsage(Tokens(1, 2, 3, 4, 5), Tokens(1, 0, 0, 0, 1))
    assert RunUsage.from_dict(json.loads(json.dumps(usage.to_dict()))) == usage
    for bad in ({"total": []}, {"total": {"input_tokens": -1}}, {"nested": {"requests": True}}):
        with pytest.raises(ValueError):
            RunUsage.from_dict(bad)
