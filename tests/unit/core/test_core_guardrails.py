"""Guardrails (core/guardrails.py): patterns under the policy's budget, verdicts, stage ordering."""

from __future__ import annotations

import json

import pytest

from agentrt.core.guardrails import (
    CANCELLED_TEXT,
    KIND_FAILED,
    KIND_TRIPPED,
    SCOPE_AGENT,
    SCOPE_TOOL,
    VERDICT_SCHEMA,
    Decision,
    ParallelGate,
    PatternRule,
    Result,
    SequentialGate,
    Stage,
    VerdictError,
    check_pattern_rule,
    evaluate_pattern,
    judge_request,
    parse_verdict,
    tool_order,
    verdict_result,
)
from agentrt.core.policy import PatternError
from agentrt.runs.spec.schemas import validator

SECRETS = PatternRule("no_secrets", (r"sk-[A-Za-z0-9]{8,}", r"(?i)password\s*="))


def test_a_pattern_trips_naming_itself_and_allows_otherwise():
    ok = evaluate_pattern(SECRETS, Stage.OUTPUT, "all clear")
    assert (ok.decision, ok.ends_run, ok.failure_kind) == (Decision.ALLOW, False, "")
    hit = evaluate_pattern(
        SECRETS, Stage.TOOL_OUTPUT, "token PASSWORD = hunter2", call_id="c1", scope=SCOPE_TOOL
    )
    assert (hit.decision, hit.call_id, hit.scope) == (Decision.TRIP, "c1", SCOPE_TOOL)
    assert "(?i)password\\s*=" in hit.message and hit.failure_kind == KIND_TRIPPED
    assert hit.failure_details() == {
        "guardrail": "no_secrets",
        "stage": "tool_output",
        "scope": "tool",
        "call_id": "c1",
    }
    assert "tool_output guardrail 'no_secrets' tripped" in hit.failure_message()


def test_the_whole_text_is_searched_never_a_prefix():
    padded = "x" * 200_000 + " sk-ABCDEFGH12"
    assert evaluate_pattern(SECRETS, Stage.OUTPUT, padded).decision == Decision.TRIP


def test_replace_and_custom_trip_messages():
    replace = PatternRule("redact", ("secret",), Decision.REPLACE, "[removed]")
    got = evaluate_pattern(replace, Stage.TOOL_OUTPUT, "the secret is 42")
    assert (got.decision, got.message, got.ends_run) == (Decision.REPLACE, "[removed]", False)
    custom = PatternRule("polite", ("damn",), message="Please keep it civil.")
    assert evaluate_pattern(custom, Stage.INPUT, "damn it").message == "Please keep it civil."


def test_a_pattern_out_of_its_time_budget_is_an_error_that_fails_closed():
    slow = PatternRule("slow", (r"(a|a)+$",))
    got = evaluate_pattern(slow, Stage.INPUT, "a" * 40 + "b", budget=0.002)
    assert got.decision is None and "took longer than 2 ms" in got.error
    assert (got.ends_run, got.failure_kind) == (True, KIND_FAILED)
    assert "could not decide" in got.failure_message()


def test_patterns_are_checked_with_the_command_policys_rules():
    check_pattern_rule(SECRETS)
    with pytest.raises(PatternError) as info:
        check_pattern_rule(PatternRule("bad", ("fine", "x(")))
    assert info.value.index == 1
    with pytest.raises(PatternError):
        check_pattern_rule(PatternRule("posix", ("[[:digit:]]",)))
    with pytest.raises(PatternError) as info:
        check_pattern_rule(PatternRule("many", ("a",) * 257))
    assert info.value.index == -1


def test_verdicts_are_the_json_object_and_nothing_else():
    assert parse_verdict('{"decision": "allow", "message": "fine"}').decision == Decision.ALLOW
    assert parse_verdict('{"decision": "trip", "message": "abuse", "score": 0.9}').message == "abuse"
    assert parse_verdict(' {"decision": "replace", "message": "[redacted]"} ').message == "[redacted]"
    assert parse_verdict('{"decision": "allow"}').message == ""
    bad = [
        "allow",
        '```json\n{"decision": "allow"}\n```',
        '["allow"]',
        '{"decision": "block"}',
        '{"decision": "replace", "message": ""}',
        '{"decision": "trip", "message": 3}',
    ]
    for reply in bad:
        with pytest.raises(VerdictError):
            parse_verdict(reply)
    failed = verdict_result("judge", Stage.INPUT, "I think it is fine")
    assert failed.decision is None and failed.error.startswith("the judge's reply is not a verdict")
    assert failed.failure_kind == KIND_FAILED


def test_the_verdict_schema_accepts_exactly_the_verdicts():
    check = validator(json.dumps(VERDICT_SCHEMA))
    assert check is not None
    assert check({"decision": "trip", "message": "x"}) == ()
    assert check({"decision": "block", "message": "x"})
    assert check({"decision": "allow"})  # strict providers require every property


def test_the_judge_reads_the_text_as_data():
    system, user = judge_request("Refuse medical advice.", Stage.TOOL_OUTPUT, "take two pills")
    assert system.startswith("Refuse medical advice.") and "tool output" in system
    assert "<<<\ntake two pills\n>>>" in user
    _, cut = judge_request("p", Stage.INPUT, "x" * 100_005)
    assert "[... 5 more characters not shown ...]" in cut


def r(name: str, decision: Decision | None, error: str = "", stage: Stage = Stage.INPUT) -> Result:
    return Result(name, stage, decision, error=error)


def test_concurrent_stage_fails_fast_on_the_first_tripwire_in_arrival_order():
    gate = ParallelGate(["a", "b", "c"], Stage.INPUT)
    assert gate.offer(r("b", Decision.ALLOW)) is False
    assert gate.offer(r("c", Decision.TRIP)) is True  # the wait ends here
    assert gate.ended_by is not None and gate.ended_by.guardrail == "c"
    assert [x.guardrail for x in gate.cancelled()] == ["a"]
    assert gate.cancelled()[0].error == CANCELLED_TEXT and not gate.cancelled()[0].ends_run
    assert gate.offer(r("a", Decision.TRIP)) is True and gate.ended_by.guardrail == "c"  # later: ignored
    assert gate.replacement is None


def test_concurrent_stage_errors_end_it_too_and_replaces_pick_declaration_order():
    gate = ParallelGate(["a", "b"], Stage.OUTPUT)
    assert gate.offer(r("a", None, error="judge unavailable", stage=Stage.OUTPUT))
    assert gate.ended_by is not None and gate.ended_by.failure_kind == KIND_FAILED
    gate = ParallelGate(["a", "b", "c"], Stage.OUTPUT)
    for result in (
        Result("c", Stage.OUTPUT, Decision.REPLACE, "C"),
        Result("b", Stage.OUTPUT, Decision.REPLACE, "B"),
        Result("c", Stage.OUTPUT, Decision.TRIP),  # a repeat is ignored
        Result("zz", Stage.OUTPUT, Decision.TRIP),  # not of this stage: ignored
    ):
        assert gate.offer(result) is False
    assert gate.offer(Result("a", Stage.OUTPUT, Decision.ALLOW)) is True
    assert gate.replacement is not None and gate.replacement.message == "B"
    assert [x.guardrail for x in gate.results] == ["a", "b", "c"]


def test_tool_stages_run_in_order_and_stop_at_the_first_replace_or_trip():
    order = tool_order(["a1", "a2"], ["t1"])
    assert order == [("a1", SCOPE_AGENT), ("a2", SCOPE_AGENT), ("t1", SCOPE_TOOL)]
    gate = SequentialGate(order)
    consulted = []
    answers = {"a1": Decision.ALLOW, "a2": Decision.REPLACE, "t1": Decision.TRIP}
    while (entry := gate.next()) is not None:
        consulted.append(entry[0])
        gate.offer(Result(entry[0], Stage.TOOL_INPUT, answers[entry[0]], "substitute", scope=entry[1]))
    assert consulted == ["a1", "a2"]  # t1 never judges the original after a2 replaced it
    assert gate.outcome is not None and gate.outcome.guardrail == "a2"
    all_allow = SequentialGate(order)
    while (entry := all_allow.next()) is not None:
        all_allow.offer(Result(entry[0], Stage.TOOL_OUTPUT, Decision.ALLOW))
    assert all_allow.outcome is None and len(all_allow.results) == 3
    erroring = SequentialGate(order)
    erroring.offer(Result("a1", Stage.TOOL_OUTPUT, None, error="pattern too slow"))
    assert erroring.next() is None and erroring.outcome is not None
