"""Pure mapping pieces: exact spans, ids, finishing, provider JSON -> canonical, local replies."""

from __future__ import annotations

import json

import pytest

from agentrt.core.errors import MeshError
from agentrt.gateway.errors import ProviderError
from agentrt.gateway.providers import canonical as cn
from agentrt.gateway.providers import local_prompt
from agentrt.gateway.providers.anthropic_messages import _EventAccumulator, map_body
from agentrt.gateway.providers.jsonspans import content_sources, member_spans
from agentrt.gateway.providers.local import parse_reply
from agentrt.gateway.providers.openai_responses import map_response
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g


def test_spans_cut_the_exact_source_text():
    body = (
        '{"id": "m", "content": [ {"type": "text", "text": "a"},\n'
        ' {"type":"tool_use","input" : { "x" :1 ,"y":"\\u00e9"} } ]}'
    )
    sources = content_sources(body)
    assert sources[1][1] == '{ "x" :1 ,"y":"\\u00e9"}'
    assert sources[0][1] == ""
    assert member_spans('{"a": [1, 2], "b": {}}') == {"a": (6, 12), "b": (19, 21)}
    with pytest.raises(ValueError):
        member_spans("[1]")


def test_anthropic_body_keeps_input_text_and_maps_usage():
    body = (
        '{"id":"msg_1","model":"claude","content":[{"type":"thinking","thinking":"t","signature":"s"},'
        '{"type":"tool_use","id":"toolu_1","name":"exec","input":{"cmd":   "ls"}},'
        '{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{"q":"x"}}],'
        '"stop_reason":"tool_use","usage":{"input_tokens":5,"cache_read_input_tokens":7,'
        '"cache_creation_input_tokens":1,"output_tokens":3}}'
    )
    r = map_body(body)
    assert [b.WhichOneof("block") for b in r.content] == ["thinking", "tool_use", "raw"]
    assert r.content[0].thinking.signature == "s"
    assert r.content[1].tool_use.arguments == '{"cmd":   "ls"}'
    assert json.loads(r.content[2].raw.json)["name"] == "web_search"
    assert (r.usage.input_tokens, r.usage.cached_input_tokens, r.usage.output_tokens) == (13, 7, 3)


def test_anthropic_stream_must_be_whole():
    acc = _EventAccumulator()
    with pytest.raises(ProviderError):
        acc.add({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    acc = _EventAccumulator()
    acc.add({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}})
    acc.add({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    acc.add({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
    acc.add({"type": "message_stop"})
    with pytest.raises(ProviderError, match="open"):
        acc.response()


def test_openai_incomplete_and_failed_responses():
    base = {"id": "r", "model": "m", "usage": {"input_tokens": 3, "output_tokens": 2}}
    cut = map_response(
        {
            **base,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a": '}],
        }
    )
    assert cut.stop_reason == c.STOP_REASON_MAX_TOKENS and cn.tool_calls(cut) == []
    assert cut.provider_stop_reason == "incomplete:max_output_tokens"
    with pytest.raises(ProviderError) as failed:
        map_response(
            {**base, "status": "failed", "error": {"code": "context_length_exceeded", "message": "too long"}}
        )
    assert failed.value.reason == "CONTEXT_OVERFLOW"
    with pytest.raises(ProviderError):
        map_response({**base, "status": "incomplete", "incomplete_details": {"reason": "something_new"}})


def test_tool_call_blocks_classify_their_arguments():
    ok = cn.tool_call_block(0, "call_1", "f", ' {"a": 1} ').tool_use
    assert ok.arguments == ' {"a": 1} ' and ok.invalid_arguments == ""
    bad = cn.tool_call_block(1, "", "f", '{"a": ').tool_use
    assert bad.arguments == "" and bad.invalid_arguments == '{"a": ' and bad.call_id == "call_1"
    assert cn.render_args(bad) == json.dumps({"invalid_json": '{"a": '})
    assert cn.render_args(c.ToolCall(name="f")) == "{}"


def test_safe_ids_match_the_anthropic_pattern_and_never_collide():
    assert cn.safe_id("toolu_01A") == "toolu_01A"
    a, b = cn.safe_id("step:1/a"), cn.safe_id("step_1_a")
    assert a != b and all(ch.isalnum() or ch in "_-" for ch in a)
    assert len(cn.safe_id("x" * 200)) <= 64


def test_finish_drops_calls_of_unsafe_stops_only():
    resp = c.ModelResponse(stop_reason=c.STOP_REASON_REFUSAL)
    resp.content.append(cn.text_block("no"))
    resp.content.append(cn.tool_call_block(0, "c", "f", "{}"))
    assert [b.WhichOneof("block") for b in cn.finish(resp).content] == ["text"]
    ok = c.ModelResponse(stop_reason=c.STOP_REASON_TOOL_USE, content=[cn.tool_call_block(0, "c", "f", "{}")])
    assert len(cn.finish(ok).content) == 1


def _local_request(mode: int = c.TOOL_CHOICE_MODE_UNSPECIFIED, name: str = "") -> g.ModelRequest:
    request = g.ModelRequest(messages=[c.Message(role=c.ROLE_USER)])
    request.tools.add(
        name="exec_command",
        parameters_json_schema='{"type":"object","properties":{"cmd":{"type":"string","maxLength":5}}}',
    )
    request.tools.add(name="read_file")
    request.settings.tool_choice.CopyFrom(c.ToolChoice(mode=mode, name=name))  # type: ignore[arg-type]
    return request


def test_local_output_schema_follows_tool_choice():
    auto = local_prompt.output_schema(_local_request())
    assert len(auto["anyOf"]) == 3 and auto["anyOf"][2]["required"] == ["answer"]
    exec_args = auto["anyOf"][0]["properties"]["arguments"]
    assert exec_args["additionalProperties"] is False and "maxLength" not in exec_args["properties"]["cmd"]
    named = local_prompt.output_schema(_local_request(c.TOOL_CHOICE_MODE_NAMED, "read_file"))
    assert named["properties"]["tool"] == {"const": "read_file"}
    none = local_prompt.output_schema(_local_request(c.TOOL_CHOICE_MODE_NONE))
    assert none["required"] == ["answer"]


def test_local_prompt_is_chatml_with_the_model_own_reply_format():
    request = _local_request()
    request.messages.append(
        c.Message(
            role=c.ROLE_ASSISTANT,
            content=[
                c.ContentBlock(tool_use=c.ToolCall(call_id="1", name="read_file", arguments='{"path": "a"}'))
            ],
        )
    )
    text = local_prompt.prompt(request)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert '{"tool": "read_file", "arguments": {"path": "a"}}' in text


def test_local_reply_parsing():
    blocks, stop = parse_reply(
        '{"tool": "exec_command", "arguments": {"cmd":  "ls"}}', "stop", {"exec_command"}
    )
    assert stop == c.STOP_REASON_TOOL_USE and blocks[0].tool_use.arguments == '{"cmd":  "ls"}'
    blocks, stop = parse_reply('{"answer": "done"}', "stop", {"exec_command"})
    assert stop == c.STOP_REASON_END_TURN and blocks[0].text.text == "done"
    blocks, stop = parse_reply('{"answer": "do', "length", set())
    assert stop == c.STOP_REASON_MAX_TOKENS and blocks[0].WhichOneof("block") == "text"


def test_validation_limits():
    from agentrt.gateway.validation import parse_json_object

    with pytest.raises(MeshError) as deep:
        parse_json_object('{"a":' * 65 + "1" + "}" * 65, "f")
    assert deep.value.reason == "REQUEST_TOO_LARGE" and deep.value.metadata["limit"] == "depth"
    with pytest.raises(MeshError) as recursion:
        parse_json_object('{"a":' + "[" * 100_000 + "]" * 100_000 + "}", "f")
    assert recursion.value.reason == "REQUEST_TOO_LARGE"
    assert parse_json_object('{"a":' * 63 + "1" + "}" * 63, "f")
