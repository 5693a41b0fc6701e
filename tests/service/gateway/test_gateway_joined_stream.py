"""A journaled stream over real gateways after decision 0041: joined deltas, live, leases kept.

- deltas that are ready together may travel as one message; what a reader reads (the text,
  each call's name and arguments, the final) is what the provider sent;
- nothing waits for more: the first delta of a slow stream reaches the caller while the
  provider is still sending the rest;
- a live holder's lease is renewed (a timer per call) for as long as its call runs, so a
  repeat on another replica waits for the answer instead of taking the call over.
"""

from __future__ import annotations

import uuid

import grpc
from gateway_helpers import emulator_config, model_request, user

from agentrt.gateway.server import build_server
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply

MODEL_PATHS = ("/v1/responses", "/v1/chat/completions", "/v1/messages")


def keyed(provider: str = "openai") -> pb.ModelRequest:
    request = model_request(provider, user("write out.txt"))
    request.idempotency_key = f"run-{uuid.uuid4().hex}/turn-1/ctx-3-e1"
    return request


def asked(emu) -> int:
    return sum(1 for path, _ in emu.requests if path in MODEL_PATHS)


async def open_gateways(start_server, emu, count: int = 1, **overrides: object):
    stubs, channels = [], []
    for _ in range(count):
        address = await start_server(build_server(emulator_config(emu, **overrides)))
        channel = grpc.aio.insecure_channel(address)
        channels.append(channel)
        stubs.append(pb_grpc.ModelGatewayServiceStub(channel))
    return stubs, channels


async def test_a_joined_stream_reads_as_the_providers(start_server, emu, tmp_path):
    (gw,), channels = await open_gateways(
        start_server, emu, journal_url=f"sqlite+aiosqlite:///{tmp_path}/g.db"
    )
    for provider in ("openai", "openai-chat", "anthropic"):
        args = '{"path": "notes.txt", "content": "a line"}'
        emu.script(
            [
                Reply(
                    text="Writing the file now.",
                    tool_calls=[ToolCallReply("write_file", args)],
                    chunk_chars=2,
                )
            ]
        )
        request = keyed(provider)
        live = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
        replay = [i async for i in gw.StreamGenerate(pb.StreamGenerateRequest(request=request))]
        for items in (live, replay):
            kinds = [i.WhichOneof("event") for i in items]
            assert kinds.count("final") == 1 and kinds[-1] == "final"
            assert "".join(i.text_delta for i in items) == "Writing the file now."
            calls = [i.tool_call_delta for i in items if i.WhichOneof("event") == "tool_call_delta"]
            assert {c.index for c in calls} == {0}
            assert "".join(c.name for c in calls) == "write_file"
            assert "".join(c.arguments_delta for c in calls) == args
        # 11 text fragments and the call's fragments at most, fewer when they came together
        assert len(live) <= 1 + 11 + 1 + len(args) // 2 + 1
        assert replay[-1].final.response == live[-1].final.response
    for ch in channels:
        await ch.close()


async def test_the_first_delta_does_not_wait_for_the_rest(start_server, emu):
    (gw,), channels = await open_gateways(start_server, emu)
    text = "one two three four five six"
    emu.script([Reply(text=text, chunk_chars=4, event_delay=0.2)])
    call = gw.StreamGenerate(pb.StreamGenerateRequest(request=keyed()))
    first = ""
    async for item in call:
        if item.text_delta:
            first = item.text_delta
            break
    # The provider sends a fragment every 0.2 s: what had come by then, not the whole text.
    assert first and len(first) < len(text) and text.startswith(first)
    call.cancel()
    for ch in channels:
        await ch.close()


async def test_a_live_holders_lease_is_renewed_while_its_call_runs(start_server, emu, tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/gateway.db"
    (a, b), channels = await open_gateways(
        start_server, emu, count=2, journal_url=url, journal_lease_seconds=0.6
    )
    text = "a long answer, streamed slowly for longer than the lease"
    emu.script([Reply(text=text, chunk_chars=3, event_delay=0.08)])  # about 1.5 s, 2.5 leases
    request = keyed()
    first = a.StreamGenerate(pb.StreamGenerateRequest(request=request))
    seen = ""
    async for item in first:
        seen += item.text_delta
        if len(seen) >= len(text) // 2:  # past one lease: renewed by now, or taken over below
            break
    repeat = [i async for i in b.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    assert asked(emu) == 1  # b waited for a's answer: a's lease was kept alive
    assert repeat[-1].final.replayed
    assert "".join(i.text_delta for i in repeat) == text
    rest = [i async for i in first]
    assert seen + "".join(i.text_delta for i in rest) == text
    assert not rest[-1].final.replayed
    for ch in channels:
        await ch.close()
