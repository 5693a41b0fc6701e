"""Generate over a real channel, for every remote adapter, against the wire emulator."""

from __future__ import annotations

import grpc
import pytest
from gateway_helpers import REMOTE, calls, generate, kinds, user

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as c
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply

pytestmark = pytest.mark.parametrize("provider", REMOTE)


async def test_text_answer(gateway, emu, provider):
    emu.script([Reply(text="done", input_tokens=12, output_tokens=3)])
    out = await gateway.Generate(generate(provider))
    r = out.response
    assert kinds(r) == ["text"] and r.content[0].text.text == "done"
    assert r.stop_reason == c.STOP_REASON_END_TURN
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.requests) == (12, 3, 1)
    assert r.model.provider == provider
    assert out.retries == 0


async def test_one_tool_call_keeps_the_exact_argument_string(gateway, emu, provider):
    args = '{ "cmd" :  "echo hi > out.txt",\n\t"note": "caf\\u00e9 ☕"  }'
    emu.script([Reply(text="writing", tool_calls=[ToolCallReply("exec_command", args)])])
    r = (await gateway.Generate(generate(provider))).response
    assert r.stop_reason == c.STOP_REASON_TOOL_USE
    (call,) = calls(r)
    assert call.name == "exec_command"
    assert call.arguments == args  # byte for byte, whitespace and escapes included
    assert call.provider_call_id and call.call_id and call.index == 0
    assert kinds(r) == ["text", "tool_use"]


async def test_several_tool_calls_in_one_response(gateway, emu, provider):
    emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", '{"cmd": "ls"}'),
                    ToolCallReply("write_file", '{"path": "a.txt", "content": "x"}'),
                ]
            )
        ]
    )
    r = (await gateway.Generate(generate(provider))).response
    got = calls(r)
    assert [(t.name, t.arguments, t.index) for t in got] == [
        ("exec_command", '{"cmd": "ls"}', 0),
        ("write_file", '{"path": "a.txt", "content": "x"}', 1),
    ]
    assert len({t.call_id for t in got}) == 2


async def test_refusal(gateway, emu, provider):
    emu.script([Reply(text="I can't help with that.", stop="refusal")])
    r = (await gateway.Generate(generate(provider))).response
    assert r.stop_reason == c.STOP_REASON_REFUSAL
    assert r.refusal == "I can't help with that."
    assert calls(r) == []


async def test_truncated_tool_call_is_dropped(gateway, emu, provider):
    emu.script(
        [Reply(text="let me", tool_calls=[ToolCallReply("write_file", '{"path": "/ho')], stop="max_tokens")]
    )
    r = (await gateway.Generate(generate(provider))).response
    assert r.stop_reason == c.STOP_REASON_MAX_TOKENS
    assert calls(r) == []  # no partial tool call ever executes
    assert kinds(r) == ["text"]


async def test_context_overflow_is_not_a_plain_bad_request(gateway, emu, provider):
    emu.script([ErrorReply(status=400, kind="context_overflow"), ErrorReply(status=400)])
    with pytest.raises(grpc.aio.AioRpcError) as overflow:
        await gateway.Generate(generate(provider))
    assert overflow.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(overflow.value) == "CONTEXT_OVERFLOW"
    with pytest.raises(grpc.aio.AioRpcError) as plain:
        await gateway.Generate(generate(provider))
    assert plain.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(plain.value) == "INVALID_REQUEST"
    assert len(emu.requests) == 2  # neither was retried


async def test_context_window_stop(gateway, emu, provider):
    # Anthropic's success-shaped model_context_window_exceeded is an overflow, never an
    # answer or a truncation (004 §2.5g, issue 9); OpenAI's is its 400 error.
    emu.script([Reply(text="The answer is", stop="context_window")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "CONTEXT_OVERFLOW"
    if provider == "anthropic":
        assert details_of(info.value)[1]["provider_code"] == "model_context_window_exceeded"
    assert len(emu.requests) == 1  # never retried: the same request stops at the same wall


async def test_truncated_response_is_never_an_overflow(gateway, emu, provider):
    # A response cut at the output cap is a truncation (004 §2.7e), whatever its text says.
    emu.script(
        [
            Reply(
                text="the context window is full",
                tool_calls=[ToolCallReply("x", '{"a": ')],
                stop="max_tokens",
            )
        ]
    )
    r = (await gateway.Generate(generate(provider))).response
    assert r.stop_reason == c.STOP_REASON_MAX_TOKENS
    assert not [b for b in r.content if b.WhichOneof("block") == "tool_use"]


async def test_rate_limit_is_retried_after_retry_after(gateway, emu, provider):
    emu.script([ErrorReply(status=429, retry_after=0.05), Reply(text="ok")])
    out = await gateway.Generate(generate(provider))
    assert out.response.content[0].text.text == "ok"
    assert out.retries == 1
    assert len(emu.requests) == 2


async def test_rate_limit_exhausted_is_resource_exhausted_with_retry_info(gateway, emu, provider):
    emu.script([ErrorReply(status=429, retry_after=0.05)] * 3 + [Reply(text="never reached")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    reason, meta, retry_after = details_of(info.value)
    assert reason == "RATE_LIMITED" and meta["provider"] == provider
    assert retry_after == pytest.approx(0.05)
    assert emu.pending == 1  # the first call and exactly two retries


async def test_retry_after_beyond_the_deadline_is_not_waited_for(gateway, emu, provider):
    emu.script([ErrorReply(status=429, retry_after=30), Reply(text="never reached")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider), timeout=5)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details_of(info.value)[2] == pytest.approx(30)
    assert emu.pending == 1


async def test_overloaded_is_retried_then_unavailable(gateway, emu, provider):
    emu.script([ErrorReply(status=529), Reply(text="recovered")])
    out = await gateway.Generate(generate(provider))
    assert out.response.content[0].text.text == "recovered" and out.retries == 1
    emu.script([ErrorReply(status=529)] * 3)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(info.value) == "PROVIDER_UNAVAILABLE"


async def test_authentication_failure(gateway, emu, provider):
    emu.script([ErrorReply(status=401)])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(info.value) == "PROVIDER_AUTHENTICATION"


async def test_history_renders_tool_calls_and_results(gateway, emu, provider):
    call = c.ToolCall(call_id="step:1/a", name="exec_command", arguments='{"cmd":  "ls"}')
    history = [
        user("list files"),
        c.Message(
            role=c.ROLE_ASSISTANT,
            content=[c.ContentBlock(text=c.TextBlock(text="listing")), c.ContentBlock(tool_use=call)],
        ),
        c.Message(
            role=c.ROLE_USER,
            content=[
                c.ContentBlock(
                    tool_result=c.ToolResult(
                        call_id="step:1/a", name="exec_command", content="a.txt", is_error=True
                    )
                )
            ],
        ),
    ]
    emu.script([Reply(text="done")])
    await gateway.Generate(generate(provider, *history, disable_parallel_tool_calls=True))
    (_, body), *_ = emu.requests
    if provider == "openai":
        fc = next(i for i in body["input"] if i.get("type") == "function_call")
        out = next(i for i in body["input"] if i.get("type") == "function_call_output")
        assert fc["arguments"] == '{"cmd":  "ls"}' and fc["call_id"] == out["call_id"]
        assert out["output"] == "a.txt" and body["parallel_tool_calls"] is False and body["store"] is False
    elif provider == "openai-chat":
        assistant = next(m for m in body["messages"] if m["role"] == "assistant")
        tool = next(m for m in body["messages"] if m["role"] == "tool")
        assert assistant["tool_calls"][0]["function"]["arguments"] == '{"cmd":  "ls"}'
        assert assistant["tool_calls"][0]["id"] == tool["tool_call_id"]
        assert body["parallel_tool_calls"] is False
    else:
        tool_use = body["messages"][1]["content"][1]
        tool_result = body["messages"][2]["content"][0]
        assert tool_use["input"] == {"cmd": "ls"} and tool_result["is_error"] is True
        assert tool_use["id"] == tool_result["tool_use_id"]
        assert all(ch.isalnum() or ch in "_-" for ch in tool_use["id"])  # ^[a-zA-Z0-9_-]+$
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
