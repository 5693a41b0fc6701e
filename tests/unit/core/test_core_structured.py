"""Structured output (core/structured.py): the strategy, the output tool, judging a final turn."""

from __future__ import annotations

import json

import pytest

from agentrt.core.decide import Call
from agentrt.core.errors import Reason
from agentrt.core.structured import (
    DUPLICATE_TEXT,
    FINAL_OUTPUT_TOOL,
    KIND_INVALID_FINAL_OUTPUT,
    MIXED_TEXT,
    PROVIDERS_WITHOUT_TOOLS_AND_FORMAT,
    Kind,
    Requested,
    Strategy,
    choose_strategy,
    judge,
    native_conflict,
    output_tool,
    split_output_calls,
    wraps,
)
from agentrt.gateway.errors import ProviderError
from agentrt.gateway.providers import anthropic_messages, openai_chat, openai_responses
from agentrt.gateway.providers.provider import Call as ProviderCall
from agentrt.runs.spec.schemas import validator
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
CHECK = validator(json.dumps(SCHEMA))


def out_call(args: str, call_id: str = "c0") -> Call:
    return Call(0, call_id, FINAL_OUTPUT_TOOL, args)


def test_auto_uses_the_output_tool_only_where_a_provider_cannot_combine_tools_and_a_format():
    assert choose_strategy(Requested.AUTO, "openai", offers_tools=True) == Strategy.TOOL
    for provider in ("anthropic", "openai-chat", "local"):
        assert choose_strategy(Requested.AUTO, provider, offers_tools=True) == Strategy.NATIVE
    # a tool-free turn (recovery, closing call) is native everywhere
    assert choose_strategy(Requested.AUTO, "openai", offers_tools=False) == Strategy.NATIVE
    assert choose_strategy(Requested.TOOL, "openai", offers_tools=False) == Strategy.NATIVE
    assert choose_strategy(Requested.TOOL, "anthropic", offers_tools=True) == Strategy.TOOL
    assert choose_strategy(Requested.NATIVE, "anthropic", offers_tools=True) == Strategy.NATIVE
    assert native_conflict(Requested.NATIVE, "openai", has_tools=True)
    assert not native_conflict(Requested.NATIVE, "openai", has_tools=False)
    assert not native_conflict(Requested.AUTO, "openai", has_tools=True)


def _request(provider: str) -> ProviderCall:
    tool = c.ToolSpec(name="read_file", description="reads", parameters_json_schema='{"type": "object"}')
    request = g.ModelRequest(
        model=c.ModelRef(provider=provider, model="m"),
        messages=[c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text="hi"))])],
        tools=[tool],
        settings=c.ModelSettings(output_json_schema=json.dumps(SCHEMA)),
    )
    return ProviderCall(request, "m", 30.0)


def test_the_provider_table_is_what_the_gateway_adapters_do():
    # The gateway is the truth: the Responses adapter refuses tools + a format, the others send both.
    with pytest.raises(ProviderError) as info:
        openai_responses.build_params(_request("openai"))
    assert info.value.reason == Reason.UNSUPPORTED_CAPABILITY
    assert "tools" in openai_chat.build_params(_request("openai-chat"))
    assert "tools" in anthropic_messages.build_params(_request("anthropic"), 1024)
    assert PROVIDERS_WITHOUT_TOOLS_AND_FORMAT == {"openai"}


def test_the_output_tool_is_the_schema_or_wraps_a_non_object():
    tool = output_tool(SCHEMA)
    assert (tool.name, tool.parameters, tool.wrapped) == (FINAL_OUTPUT_TOOL, SCHEMA, False)
    listed = output_tool({"type": "array", "items": {"type": "string"}})
    assert listed.wrapped and listed.parameters["required"] == ["output"]
    assert listed.parameters["properties"]["output"] == {"type": "array", "items": {"type": "string"}}
    assert wraps({"type": ["object", "null"]}) and not wraps({"properties": {}})


def test_a_refusal_wins_over_valid_content():
    out = judge(text='{"city": "Oslo", "days": 2}', refusal="I can't help", schema_set=True, validate=CHECK)
    assert out.kind == Kind.REFUSAL


def test_plain_text_is_the_final_output_even_empty():
    assert judge(text="hello", schema_set=False, validate=None).output == "hello"
    assert judge(text="", schema_set=False, validate=None).kind == Kind.FINAL


def test_a_valid_answer_is_final_verbatim():
    text = '{"days": 2,  "city": "Oslo"}'
    out = judge(text=text, schema_set=True, validate=CHECK)
    assert (out.kind, out.output) == (Kind.FINAL, text)


def test_an_invalid_answer_gets_one_recovery_turn_with_the_pointer_then_fails():
    first = judge(text='{"city": "Oslo", "days": 0}', schema_set=True, validate=CHECK)
    assert first.kind == Kind.RECOVER and first.problem is not None
    assert first.problem.pointer == "/days"
    assert "at /days: 0 is less than the minimum of 1" in first.recovery_text
    again = judge(text='{"city": "Oslo"}', schema_set=True, validate=CHECK, recovery_used=True)
    assert again.kind == Kind.FAIL and again.failure_details() == {
        "pointer": "",
        "error": "'days' is a required property",
    }
    assert KIND_INVALID_FINAL_OUTPUT == "invalid_final_output"
    not_json = judge(text="Oslo, two days", schema_set=True, validate=CHECK)
    assert not_json.kind == Kind.RECOVER and "not valid JSON" in not_json.recovery_text


def test_the_handler_fallback_replaces_a_failure_after_the_recovery_turn():
    fallback = '{"city": "unknown", "days": 1}'
    out = judge(text="{}", schema_set=True, validate=CHECK, recovery_used=True, fallback=fallback)
    assert (out.kind, out.output, out.fallback) == (Kind.FINAL, fallback, True)
    first = judge(text="{}", schema_set=True, validate=CHECK, fallback=fallback)
    assert first.kind == Kind.RECOVER  # the recovery turn comes first


def test_an_empty_structured_turn_continues_unless_a_fallback_is_declared():
    assert judge(text="  ", schema_set=True, validate=CHECK).kind == Kind.CONTINUE
    out = judge(text="", schema_set=True, validate=CHECK, fallback='{"city": "x", "days": 1}')
    assert out.kind == Kind.FINAL and out.fallback


def test_the_output_calls_arguments_are_the_answer_and_unwrap():
    args = '{"city": "Rome", "days": 3}'
    out = judge(text="here you go", schema_set=True, validate=CHECK, output_calls=[out_call(args)])
    assert (out.kind, out.output) == (Kind.FINAL, args)
    items = validator(json.dumps({"type": "array", "items": {"type": "integer"}}))
    wrapped = judge(
        text="", schema_set=True, validate=items, output_calls=[out_call('{"output": [1, 2]}')], wrapped=True
    )
    assert (wrapped.kind, json.loads(wrapped.output)) == (Kind.FINAL, [1, 2])
    bad = judge(
        text="", schema_set=True, validate=items, output_calls=[out_call('{"output": ["x"]}')], wrapped=True
    )
    assert bad.kind == Kind.RECOVER and bad.problem is not None and bad.problem.pointer == "/0"


def test_a_schema_that_cannot_be_compiled_only_needs_json():
    assert judge(text='{"any": 1}', schema_set=True, validate=None).kind == Kind.FINAL
    assert judge(text="nope", schema_set=True, validate=None).kind == Kind.RECOVER


def test_output_calls_must_come_alone_and_only_the_first_is_taken():
    mixed = split_output_calls([Call(0, "a", "read_file", "{}"), out_call("{}", "b")])
    assert mixed.taken == () and [(x.call_id, t) for x, t in mixed.answers] == [("b", MIXED_TEXT)]
    dup = split_output_calls([out_call("{}", "a"), out_call("{}", "b")])
    assert [x.call_id for x in dup.taken] == ["a"] and [(x.call_id, t) for x, t in dup.answers] == [
        ("b", DUPLICATE_TEXT)
    ]
    none = split_output_calls([Call(0, "a", "read_file", "{}")])
    assert (none.taken, none.answers) == ((), ())
