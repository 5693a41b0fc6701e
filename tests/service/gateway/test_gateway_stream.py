"""StreamGenerate over a real channel: deltas, exactly one final, early ends, cancellation."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from gateway_helpers import REMOTE, calls, model_request

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply

pytestmark = pytest.mark.parametrize("provider", REMOTE)


def stream_request(provider: str) -> pb.StreamGenerateRequest:
    return pb.StreamGenerateRequest(request=model_request(provider))


async def collect(gateway, provider: str) -> list[pb.StreamGenerateResponse]:
    return [item async for item in gateway.StreamGenerate(stream_request(provider))]


async def test_deltas_then_exactly_one_final(gateway, emu, provider):
    args = '{"cmd":   "echo hi > out.txt"}'
    emu.script(
        [
            Reply(
                text="I will write the file now.",
                thinking="The user wants a file.",
                tool_calls=[ToolCallReply("exec_command", args)],
                input_tokens=40,
                output_tokens=9,
            )
        ]
    )
    items = await collect(gateway, provider)
    events = [i.WhichOneof("event") for i in items]
    assert events[-1] == "final" and events.count("final") == 1
    assert "".join(i.text_delta for i in items) == "I will write the file now."
    assert "".join(i.thinking_delta for i in items) == "The user wants a file."
    fragments = [i.tool_call_delta for i in items if i.WhichOneof("event") == "tool_call_delta"]
    assert fragments[0].name == "exec_command" and {f.index for f in fragments} == {0}
    assert "".join(f.arguments_delta for f in fragments) == args
    assert events.count("text_delta") > 1  # really streamed, not one lump
    final = items[-1].final.response
    assert final.stop_reason == c.STOP_REASON_TOOL_USE
    assert [t.arguments for t in calls(final)] == [args]
    assert final.usage.input_tokens == 40 and final.usage.output_tokens == 9


async def test_streamed_truncation_drops_the_partial_call(gateway, emu, provider):
    emu.script([Reply(tool_calls=[ToolCallReply("write_file", '{"path": "/ho')], stop="max_tokens")])
    items = await collect(gateway, provider)
    final = items[-1].final.response
    assert final.stop_reason == c.STOP_REASON_MAX_TOKENS and calls(final) == []


async def test_stream_that_ends_early_is_an_error_without_final(gateway, emu, provider):
    emu.script([Reply(text="a partial answer that never finishes", stream_cut=True)])
    seen: list[str] = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for item in gateway.StreamGenerate(stream_request(provider)):
            seen.append(item.WhichOneof("event"))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(info.value) == "PROVIDER_UNAVAILABLE"
    assert "final" not in seen and "text_delta" in seen


async def test_malformed_stream_is_an_error(gateway, emu, provider):
    emu.script([Reply(text="some text to split", stream_malformed=True)])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await collect(gateway, provider)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(info.value) == "PROVIDER_UNAVAILABLE"


async def test_error_before_the_first_delta_is_retried(gateway, emu, provider):
    emu.script([ErrorReply(status=429, retry_after=0.01), Reply(text="ok")])
    items = await collect(gateway, provider)
    assert items[-1].final.response.content[0].text.text == "ok"
    assert items[-1].final.retries == 1


async def test_client_cancel_cancels_the_provider_stream(gateway, emu, provider):
    emu.script([Reply(text="x" * 400, chunk_chars=4, event_delay=0.02)])
    call = gateway.StreamGenerate(stream_request(provider))
    first = await call.read()
    assert first.WhichOneof("event") in ("text_delta", "tool_call_delta")
    call.cancel()
    for _ in range(500):  # bounded poll for the observable state: the emulator saw the client go
        if emu.aborted_streams:
            break
        await asyncio.sleep(0.01)
    assert emu.aborted_streams == 1
