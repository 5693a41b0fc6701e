"""Non-finite numbers in a JSON text are invalid input, not a provider outage.

`json.loads` accepts the non-standard tokens NaN, Infinity and -Infinity, so a tool schema
(or an output schema, or a recorded tool call's arguments on Anthropic, whose body carries
them as an object) holding one passes validation. The SDK's JSON encoder then refuses the
body ("Out of range float values are not JSON compliant"), and `errors.classify` reports that
ValueError as UNAVAILABLE/PROVIDER_UNAVAILABLE "<provider> sent a malformed response", which
the gateway retried (AGENTRT_GATEWAY_MAX_RETRIES) although nothing was sent and no retry can
succeed. Validation now reads every JSON text strictly (core.jsontext): such a text is
INVALID_ARGUMENT/INVALID_JSON naming the field, like any other bad JSON text, with no retry
and nothing sent. Found by a newcomer's break-it session (failed on main 085d08f).
"""

from __future__ import annotations

import grpc
import pytest
from gateway_helpers import REMOTE, calls, emulator_config, model_request, user

from agentrt.gateway.errors import ProviderError
from agentrt.gateway.metrics import error_origin
from agentrt.gateway.providers.anthropic_messages import AnthropicMessagesProvider
from agentrt.gateway.providers.openai_chat import OpenAIChatProvider
from agentrt.gateway.providers.openai_responses import OpenAIResponsesProvider
from agentrt.gateway.providers.provider import Call
from agentrt.gateway.server import build_server
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.conftest import rpc_error_reason
from tests.emulators.providers import Reply, ToolCallReply

SCHEMA = '{"type": "object", "properties": {"cmd": {"type": "string"}}, "x": %s}'


@pytest.mark.parametrize("provider", ["openai", "openai-chat", "anthropic"])
@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
async def test_a_non_finite_number_in_a_tool_schema_is_invalid_json(gateway, emu, provider, token):
    request = model_request(provider)
    request.tools[0].parameters_json_schema = SCHEMA % token
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gateway.Generate(pb.GenerateRequest(request=request))
    # before the fix: UNAVAILABLE/PROVIDER_UNAVAILABLE "<provider> sent a malformed response: ValueError: ..."
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert rpc_error_reason(caught.value) == "INVALID_JSON"
    assert "parameters_json_schema" in caught.value.details()
    assert emu.requests == []


async def test_a_recorded_call_with_nan_arguments_is_refused_at_once_not_retried(start_server, emu):
    address = await start_server(build_server(emulator_config(emu, max_retries=2)))
    request = model_request(
        "anthropic",
        user("write out.txt"),
        c.Message(
            role=c.ROLE_ASSISTANT,
            content=[
                c.ContentBlock(
                    tool_use=c.ToolCall(call_id="t1", name="exec_command", arguments='{"cmd": NaN}')
                )
            ],
        ),
        c.Message(
            role=c.ROLE_USER,
            content=[
                c.ContentBlock(tool_result=c.ToolResult(call_id="t1", name="exec_command", content="ok"))
            ],
        ),
    )
    emu.script([Reply(text="fine")])
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ModelGatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(pb.GenerateRequest(request=request))
    # before the fix: UNAVAILABLE/PROVIDER_UNAVAILABLE after 2 retries of an encoding error
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert "tool_use.arguments" in caught.value.details()


def recorded_call(arguments: str) -> tuple[c.Message, c.Message]:
    """Return an assistant message with one recorded exec_command call, and its result."""
    call = c.ToolCall(call_id="t1", name="exec_command", arguments=arguments)
    result = c.ToolResult(call_id="t1", name="exec_command", content="ok")
    return (
        c.Message(role=c.ROLE_ASSISTANT, content=[c.ContentBlock(tool_use=call)]),
        c.Message(role=c.ROLE_USER, content=[c.ContentBlock(tool_result=result)]),
    )


@pytest.mark.parametrize("provider", REMOTE)
@pytest.mark.parametrize("token", ["NaN", "-Infinity", "1e999"])
async def test_a_non_finite_number_in_the_output_schema_is_invalid_json(gateway, emu, provider, token):
    request = model_request(provider, output_json_schema=SCHEMA % token)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gateway.Generate(pb.GenerateRequest(request=request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert rpc_error_reason(caught.value) == "INVALID_JSON"
    assert "settings.output_json_schema" in caught.value.details()
    assert emu.requests == []


@pytest.mark.parametrize("provider", REMOTE)
async def test_recorded_non_finite_arguments_are_refused_on_every_provider(gateway, emu, provider):
    # OpenAI would take the string as is; the gateway still refuses what is not JSON, the
    # same way for every provider, naming the block.
    request = model_request(provider, user("go"), *recorded_call('{"cmd": "ls", "n": Infinity}'))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gateway.Generate(pb.GenerateRequest(request=request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert rpc_error_reason(caught.value) == "INVALID_JSON"
    assert "messages[1].content[0].tool_use.arguments" in caught.value.details()
    assert emu.requests == []


async def test_a_refused_text_is_refused_every_time_and_a_finite_one_still_passes(gateway, emu):
    # The validation cache (decision 0041) only remembers texts that passed the strict reading.
    for _ in range(3):
        request = model_request("anthropic")
        request.tools[0].parameters_json_schema = SCHEMA % "NaN"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gateway.Generate(pb.GenerateRequest(request=request))
        assert rpc_error_reason(caught.value) == "INVALID_JSON"
    emu.script([Reply(text="fine")])
    request = model_request("anthropic")
    request.tools[0].parameters_json_schema = SCHEMA % "1.5e300"
    response = (await gateway.Generate(pb.GenerateRequest(request=request))).response
    assert response.content[0].text.text == "fine"
    assert len(emu.requests) == 1


@pytest.mark.parametrize("provider", REMOTE)
async def test_a_model_reply_with_non_finite_arguments_arrives_as_invalid_arguments(gateway, emu, provider):
    # What a model writes that is not JSON travels out of band (seed 000), so the session
    # never records it as JSON and no later request replays it.
    emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": NaN}')])])
    response = (await gateway.Generate(pb.GenerateRequest(request=model_request(provider)))).response
    (call,) = calls(response)
    assert call.arguments == "" and "NaN" in call.invalid_arguments


def _adapter(provider: str, emu):
    settings = emulator_config(emu)
    if provider == "anthropic":
        return AnthropicMessagesProvider(settings.anthropic)
    if provider == "openai-chat":
        return OpenAIChatProvider(settings.openai_chat)
    return OpenAIResponsesProvider(settings.openai)


@pytest.mark.parametrize("provider", REMOTE)
@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_a_body_the_sdk_cannot_encode_is_the_gateways_failure_not_the_providers(
    emu, provider, streaming
):
    # Past validation (as a bug in it would let through), the adapter reads the schema
    # leniently and the SDK refuses to encode the body before sending anything: that is
    # the gateway's own failure, never "<provider> sent a malformed response", never retried.
    request = model_request(provider)
    request.tools[0].parameters_json_schema = SCHEMA % "NaN"
    adapter = _adapter(provider, emu)
    call = Call(request=request, model="m", timeout_seconds=5.0)
    try:
        with pytest.raises(ProviderError) as caught:
            if streaming:
                async for _ in adapter.stream(call):
                    pass
            else:
                await adapter.generate(call)
    finally:
        await adapter.close()
    err = caught.value
    assert (err.status, err.reason, err.retryable) == ("INTERNAL", "INTERNAL", False), err.message
    assert err.metadata["origin"] == "gateway" and error_origin(err) == "gateway"
    assert "nothing was sent" in err.message and "malformed response" not in err.message
    assert emu.requests == []
