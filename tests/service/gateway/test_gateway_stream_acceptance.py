"""The adapter acceptance list on StreamGenerate, for every remote adapter, against the wire emulator.

test_gateway_generate.py holds the same list for Generate; test_gateway_stream.py the stream's
own shape (deltas then one final, early ends, malformed streams, cancellation).
"""

from __future__ import annotations

import grpc
import pytest
from gateway_helpers import REMOTE, calls, model_request

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply

pytestmark = pytest.mark.parametrize("provider", REMOTE)


def stream_request(provider: str) -> pb.StreamGenerateRequest:
    return pb.StreamGenerateRequest(request=model_request(provider))


async def collect(gateway, provider: str) -> list[pb.StreamGenerateResponse]:
    return [item async for item in gateway.StreamGenerate(stream_request(provider))]


async def failing(gateway, provider: str) -> tuple[grpc.aio.AioRpcError, list[str]]:
    """Read a stream that must fail; return the error and the events seen before it."""
    seen: list[str] = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for item in gateway.StreamGenerate(stream_request(provider)):
            seen.append(item.WhichOneof("event") or "")
    assert "final" not in seen  # a failed stream never carries an accepted response
    return info.value, seen


async def test_streamed_text_answer(gateway, emu, provider):
    emu.script([Reply(text="a plain streamed answer", input_tokens=21, output_tokens=4, chunk_chars=5)])
    items = await collect(gateway, provider)
    assert "".join(i.text_delta for i in items) == "a plain streamed answer"
    final = items[-1].final.response
    assert [i.WhichOneof("event") for i in items].count("final") == 1
    assert final.stop_reason == c.STOP_REASON_END_TURN
    assert [b.text.text for b in final.content] == ["a plain streamed answer"]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (21, 4)


async def test_streamed_several_tool_calls(gateway, emu, provider):
    first, second = '{"cmd":  "ls -la"}', '{"path": "a.txt", "content": "x\\ny"}'
    emu.script(
        [
            Reply(
                tool_calls=[ToolCallReply("exec_command", first), ToolCallReply("write_file", second)],
                chunk_chars=3,
            )
        ]
    )
    items = await collect(gateway, provider)
    fragments = [i.tool_call_delta for i in items if i.WhichOneof("event") == "tool_call_delta"]
    assert [f.name for f in fragments if f.name] == ["exec_command", "write_file"]
    for index, args in ((0, first), (1, second)):
        assert "".join(f.arguments_delta for f in fragments if f.index == index) == args
    final = items[-1].final.response
    assert final.stop_reason == c.STOP_REASON_TOOL_USE
    got = calls(final)
    assert [(t.name, t.arguments, t.index) for t in got] == [
        ("exec_command", first, 0),
        ("write_file", second, 1),
    ]
    assert len({t.call_id for t in got}) == 2


async def test_streamed_refusal(gateway, emu, provider):
    emu.script([Reply(text="I can't help with that.", stop="refusal")])
    final = (await collect(gateway, provider))[-1].final.response
    assert final.stop_reason == c.STOP_REASON_REFUSAL
    assert final.refusal == "I can't help with that."
    assert calls(final) == []


async def test_streamed_truncation_mid_second_call_drops_every_call(gateway, emu, provider):
    emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", '{"cmd": "ls"}'),
                    ToolCallReply("write_file", '{"path": "/home/u'),
                ],
                stop="max_tokens",
            )
        ]
    )
    final = (await collect(gateway, provider))[-1].final.response
    assert final.stop_reason == c.STOP_REASON_MAX_TOKENS
    assert calls(final) == []  # the decision carries no call, not even the complete first one


async def test_streamed_context_overflow_error_is_not_a_plain_bad_request(gateway, emu, provider):
    emu.script([ErrorReply(status=400, kind="context_overflow"), ErrorReply(status=400)])
    overflow, _ = await failing(gateway, provider)
    assert overflow.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(overflow) == "CONTEXT_OVERFLOW"
    plain, _ = await failing(gateway, provider)
    assert plain.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(plain) == "INVALID_REQUEST"
    assert len(emu.requests) == 2  # neither was retried


async def test_streamed_context_window_stop(gateway, emu, provider):
    emu.script(
        [
            Reply(
                text="The answer",
                tool_calls=[ToolCallReply("exec_command", '{"cmd": "l')],
                stop="context_window",
            )
        ]
    )
    # Anthropic's stop is an overflow error, not a final (004 §2.5g); OpenAI's is its 400.
    error, _ = await failing(gateway, provider)
    assert reason_of(error) == "CONTEXT_OVERFLOW"


async def test_streamed_rate_limit_exhausted_carries_retry_info(gateway, emu, provider):
    emu.script([ErrorReply(status=429, retry_after=0.05)] * 3 + [Reply(text="never reached")])
    error, _ = await failing(gateway, provider)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    reason, meta, retry_after = details_of(error)
    assert reason == "RATE_LIMITED" and meta["provider"] == provider
    assert retry_after == pytest.approx(0.05)
    assert emu.pending == 1  # the first call and exactly two retries


async def test_streamed_overloaded_is_retried_then_unavailable(gateway, emu, provider):
    emu.script([ErrorReply(status=529), Reply(text="recovered")])
    final = (await collect(gateway, provider))[-1].final
    assert final.retries == 1 and final.response.content[0].text.text == "recovered"
    emu.script([ErrorReply(status=529)] * 3)
    error, _ = await failing(gateway, provider)
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(error) == "PROVIDER_UNAVAILABLE"


async def test_overloaded_error_event_inside_the_stream(gateway, emu, provider):
    # The provider's in-stream error shape (Anthropic `event: error` overloaded_error, OpenAI
    # `error` event, a Chat server's error object) after deltas reached the caller.
    emu.script([Reply(text="x" * 200, chunk_chars=4, stream_error="overloaded")])
    error, seen = await failing(gateway, provider)
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(error) == "PROVIDER_UNAVAILABLE"
    assert "overloaded" in (error.details() or "").lower()  # the event's own words, not a cut stream
    assert "text_delta" in seen
    assert len(emu.requests) == 1  # once deltas went out, the stream is not retried


async def test_streamed_authentication_failure(gateway, emu, provider):
    emu.script([ErrorReply(status=401)])
    error, _ = await failing(gateway, provider)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(error) == "PROVIDER_AUTHENTICATION"


async def test_streamed_calls_reuse_the_provider_connection(gateway, emu, provider):
    # A stream read to its end returns its connection to the SDK's pool; one closed at the
    # final event would cost a new TCP connection per call.
    emu.script([Reply(text=f"answer {i}") for i in range(4)])
    for i in range(4):
        items = await collect(gateway, provider)
        assert items[-1].final.response.content[0].text.text == f"answer {i}"
    assert emu.connections == 1
