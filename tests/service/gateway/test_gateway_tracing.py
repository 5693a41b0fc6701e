"""The gateway's CLIENT span per provider call, over a real gateway server and the provider emulator.

Spans go to the SDK's in-memory exporter (tests/tracing.py); the gateway is the production
server (`build_server`), so its RPC server span comes from MeshServer's interceptor and the
provider call span from the domain code inside it.
"""

from __future__ import annotations

import grpc
import pytest
from gateway_helpers import emulator_config, generate, model_request
from opentelemetry.trace import SpanKind, StatusCode

from agentrt.gateway.server import build_server
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ErrorReply, Reply
from tests.tracing import recorded


@pytest.fixture
async def stub(start_server, emu):
    address = await start_server(build_server(emulator_config(emu)))
    async with grpc.aio.insecure_channel(address) as channel:
        yield pb_grpc.ModelGatewayServiceStub(channel)


def _only(spans, kind: SpanKind):
    found = [s for s in spans if s.kind == kind]
    assert len(found) == 1, [(s.name, s.kind) for s in spans]
    return found[0]


@pytest.mark.parametrize("rpc", ["Generate", "StreamGenerate"])
async def test_a_provider_call_is_one_client_span_with_usage_and_its_retries_as_events(stub, emu, rpc):
    emu.script(
        [
            ErrorReply(status=429, retry_after=0.01),
            Reply(text="hello", input_tokens=12, output_tokens=3, cached_tokens=2, model="gpt-emu-2026"),
        ]
    )
    with recorded() as rec:
        if rpc == "Generate":
            answer = await stub.Generate(generate("openai"))
        else:
            items = [
                item
                async for item in stub.StreamGenerate(
                    pb.StreamGenerateRequest(request=model_request("openai"))
                )
            ]
            answer = items[-1].final
    assert answer.retries == 1
    spans = rec.spans
    server = _only(spans, SpanKind.SERVER)
    client = _only(spans, SpanKind.CLIENT)
    assert server.name == f"agentrt.v1.ModelGatewayService/{rpc}"
    assert client.name == "chat gpt-emu"
    assert client.parent is not None and client.parent.span_id == server.context.span_id
    attrs = dict(client.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-emu"
    assert attrs["gen_ai.response.model"] == "gpt-emu-2026"
    assert attrs["gen_ai.response.id"] == answer.response.response_id != ""
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (12, 3)
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 2
    assert attrs["agentrt.gateway.rpc"] == rpc and attrs["agentrt.gateway.retries"] == 1
    # the retry: a zero-duration event on the call's span, not a span of its own
    retries = [e for e in client.events if e.name == "model_retry"]
    assert len(retries) == 1
    assert dict(retries[0].attributes or {})["error.type"] == "rate_limited"
    assert dict(retries[0].attributes or {})["agentrt.retry.attempt"] == 1
    assert client.status.status_code != StatusCode.ERROR
    # no content by default: neither the prompt nor the answer is on any span
    for span in spans:
        assert not any(
            "hello" in str(v) or "write out.txt" in str(v) for v in (span.attributes or {}).values()
        )


async def test_a_failed_provider_call_is_a_failed_client_span_with_its_reason(stub, emu):
    emu.script([ErrorReply(status=400, kind="invalid_request")])
    with recorded() as rec:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generate(generate("openai"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    client = _only(rec.spans, SpanKind.CLIENT)
    assert client.status.status_code == StatusCode.ERROR
    assert dict(client.attributes or {})["error.type"] == "invalid_request"
    assert not [e for e in client.events if e.name == "model_retry"]


async def test_without_tracing_no_span_is_made_and_calls_still_answer(stub, emu):
    emu.script([ErrorReply(status=429, retry_after=0.01), Reply(text="fine")])
    answer = await stub.Generate(generate("openai"))
    assert answer.retries == 1 and answer.response.response_id
