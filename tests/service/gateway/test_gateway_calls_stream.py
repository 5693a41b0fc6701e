"""StreamGenerateCalls: StreamGenerate calls over one long-lived stream (mesh/calls.py, client/calls.py).

The production gateway against the wire emulator: a call over the stream streams exactly what
StreamGenerate streams (its deltas in order, then one final), a keyed call's repeat is answered
from the model-call journal without asking the provider again, and a refused call carries the
status and reason StreamGenerate would have ended with, the stream serving on.
"""

from __future__ import annotations

import grpc
import pytest
from gateway_helpers import model_request

from agentrt.client.calls import CallStream
from agentrt.core.errors import MeshError, Status
from agentrt.runs.peers.streams import _generate_request, _generate_split
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply


def _stream(gateway) -> CallStream:
    return CallStream(lambda: gateway.StreamGenerateCalls(), _generate_request, _generate_split)


async def test_a_call_streams_what_stream_generate_streams(gateway, emu):
    args = '{"cmd": "echo hi"}'
    reply = Reply(text="Writing it now.", tool_calls=[ToolCallReply("exec_command", args)])
    emu.script([reply, reply])
    calls = _stream(gateway)
    deltas: list[pb.StreamGenerateResponse] = []
    final = await calls.call(model_request("openai"), timeout=60, on_event=deltas.append)
    over_rpc = [
        m async for m in gateway.StreamGenerate(pb.StreamGenerateRequest(request=model_request("openai")))
    ]
    assert final.WhichOneof("event") == "final" and over_rpc[-1].WhichOneof("event") == "final"
    assert [d.WhichOneof("event") for d in deltas] == [m.WhichOneof("event") for m in over_rpc[:-1]]
    assert "".join(d.text_delta for d in deltas) == "Writing it now."
    # the same answer (the emulator mints a new call id per reply)
    got, want = final.final.response, over_rpc[-1].final.response
    assert got.content[0] == want.content[0] and got.stop_reason == want.stop_reason
    assert got.content[1].tool_use.arguments == want.content[1].tool_use.arguments == args
    calls.close()


async def test_a_keyed_repeat_is_answered_from_the_journal(gateway, emu):
    emu.script([Reply(text="once")])
    calls = _stream(gateway)
    request = model_request("openai")
    request.idempotency_key = "run_x/turn-1/ctx-1-leaf"
    first = await calls.call(request, timeout=60)
    again = await calls.call(request, timeout=60)
    asked = [p for p, _ in emu.requests if p.endswith("/responses")]
    assert len(asked) == 1  # the provider was asked once
    assert again.final.replayed and again.final.response.content == first.final.response.content
    calls.close()


async def test_a_refused_call_carries_its_status_and_the_stream_serves_on(gateway, emu):
    emu.script([Reply(text="fine")])
    calls = _stream(gateway)
    bad = model_request("openai")
    bad.model.provider = "nowhere"
    with pytest.raises(MeshError) as over_stream:
        await calls.call(bad, timeout=60)
    with pytest.raises(grpc.aio.AioRpcError) as over_rpc:
        async for _ in gateway.StreamGenerate(pb.StreamGenerateRequest(request=bad)):
            pass
    assert over_stream.value.status == Status.INVALID_ARGUMENT
    assert over_rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ok = await calls.call(model_request("openai"), timeout=60)
    assert ok.final.response.content[0].text.text == "fine"
    assert calls.opened == 1
    calls.close()
