"""Bad input, CountTokens, ListModels and health over a real channel."""

from __future__ import annotations

import json

import grpc
import pytest
from gateway_helpers import emulator_config, generate, model_request, user
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.gateway.server import build_server
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply


def _with_tool_schema(schema: str) -> pb.GenerateRequest:
    request = generate("openai", tools=False)
    request.request.tools.add(name="bad_tool", parameters_json_schema=schema)
    return request


def _deep(depth: int) -> str:
    return '{"type": "object", "properties": {"a": ' * depth + "{}" + "}}" * depth


def _bad_requests() -> list[tuple[str, pb.GenerateRequest, grpc.StatusCode, str]]:
    unknown = generate("openai")
    unknown.request.model.provider = "gemini"
    many_blocks = generate("openai")
    many_blocks.request.messages[0].content.extend(
        c.ContentBlock(text=c.TextBlock(text="x")) for _ in range(100_001)
    )
    oversize = generate("openai", user("x" * (17 * 1024 * 1024)))
    bad_role = generate("openai", c.Message(role=c.ROLE_UNSPECIFIED, content=[]))
    bad_name = generate("openai", tools=False)
    bad_name.request.tools.add(name="no spaces allowed")
    named = generate("openai", tool_choice=c.ToolChoice(mode=c.TOOL_CHOICE_MODE_NAMED, name="nope"))
    bad_args = generate(
        "openai",
        c.Message(
            role=c.ROLE_ASSISTANT,
            content=[c.ContentBlock(tool_use=c.ToolCall(call_id="a", name="t", arguments="{"))],
        ),
    )
    negative_wait = generate("openai")
    negative_wait.request.max_queue_wait.seconds = -1
    long_tenant = generate("openai")
    long_tenant.request.tenant = "x" * 5000
    newline_tenant = generate("openai")
    newline_tenant.request.tenant = "acme\nX-Injected: 1"
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    return [
        ("tenant of 5000 characters", long_tenant, invalid, "INVALID_ID"),
        ("tenant with a newline", newline_tenant, invalid, "INVALID_ID"),
        ("negative max_queue_wait", negative_wait, invalid, "INVALID_VALUE"),
        ("missing request", pb.GenerateRequest(), invalid, "MISSING_FIELD"),
        ("unknown provider", unknown, invalid, "UNKNOWN_PROVIDER"),
        ("schema not JSON", _with_tool_schema("{not json"), invalid, "INVALID_JSON"),
        ("schema not an object", _with_tool_schema('["type", "object"]'), invalid, "INVALID_JSON"),
        ("schema too deep", _with_tool_schema(_deep(70)), invalid, "REQUEST_TOO_LARGE"),
        ("too many values", many_blocks, invalid, "REQUEST_TOO_LARGE"),
        ("oversize", oversize, invalid, "REQUEST_TOO_LARGE"),
        ("no role", bad_role, invalid, "INVALID_VALUE"),
        ("bad tool name", bad_name, invalid, "INVALID_VALUE"),
        ("named tool absent", named, invalid, "UNKNOWN_TOOL"),
        ("recorded args not JSON", bad_args, invalid, "INVALID_JSON"),
        (
            "local not configured",
            generate("local"),
            grpc.StatusCode.FAILED_PRECONDITION,
            "PROVIDER_NOT_CONFIGURED",
        ),
    ]


@pytest.mark.parametrize(
    ("case", "request_", "code", "reason"), _bad_requests(), ids=lambda v: v if isinstance(v, str) else ""
)
async def test_bad_input_is_rejected_and_the_server_keeps_serving(gateway, emu, case, request_, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(request_)
    assert info.value.code() == code, case
    assert reason_of(info.value) == reason, case
    assert emu.requests == []  # nothing reached a provider
    # the same request on the streaming and counting RPCs is refused the same way
    if request_.HasField("request"):
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in gateway.StreamGenerate(pb.StreamGenerateRequest(request=request_.request)):
                pass
        assert reason_of(streamed.value) == reason
    # and the server keeps serving
    emu.script([Reply(text="still here")])
    out = await gateway.Generate(generate("openai"))
    assert out.response.content[0].text.text == "still here"


async def test_the_body_tenant_may_repeat_the_tenant_header_but_not_contradict_it(gateway, emu):
    acme = [(TENANT_HEADER, "acme")]
    other = generate("openai")
    other.request.tenant = "globex"
    for call in (
        lambda: gateway.Generate(other, metadata=acme),
        lambda: gateway.CountTokens(pb.CountTokensRequest(request=other.request), metadata=acme),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        _, metadata, _ = details_of(info.value)
        assert (reason_of(info.value), metadata["field"]) == ("INVALID_VALUE", "request.tenant")
    assert emu.requests == []
    # agreeing with the header (how runs sends it), or naming a tenant without one, is fine
    same = generate("openai")
    same.request.tenant = "acme"
    emu.script([Reply(text="a"), Reply(text="b")])
    assert (await gateway.Generate(same, metadata=acme)).response.content[0].text.text == "a"
    assert (await gateway.Generate(other)).response.content[0].text.text == "b"


async def test_tools_with_structured_output_are_refused_by_openai(gateway, emu):
    request = generate("openai", output_json_schema='{"type": "object"}')
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(request)
    assert reason_of(info.value) == "UNSUPPORTED_CAPABILITY"
    assert emu.requests == []


async def test_default_model_is_used_when_the_request_names_none(gateway, emu):
    emu.script([Reply(text="ok")])
    request = generate("")
    out = await gateway.Generate(request)
    assert out.response.model.provider == "openai"
    assert emu.requests[0][0] == "/v1/responses" and emu.requests[0][1]["model"] == "gpt-emu"


async def test_count_tokens(gateway, emu):
    emu.token_count = 321
    exact = await gateway.CountTokens(pb.CountTokensRequest(request=model_request("openai")))
    assert (exact.input_tokens, exact.kind) == (321, pb.TOKEN_COUNT_KIND_EXACT)
    estimate = await gateway.CountTokens(pb.CountTokensRequest(request=model_request("anthropic")))
    assert (estimate.input_tokens, estimate.kind) == (321, pb.TOKEN_COUNT_KIND_PROVIDER_ESTIMATE)
    assert [path for path, _ in emu.requests] == ["/v1/responses/input_tokens", "/v1/messages/count_tokens"]
    assert emu.requests[1][1]["tools"][0]["name"] == "exec_command"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.CountTokens(pb.CountTokensRequest(request=model_request("openai-chat")))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "TOKEN_COUNTING_UNSUPPORTED"


async def test_list_models(gateway):
    models = (await gateway.ListModels(pb.ListModelsRequest())).models
    assert [(m.model.provider, m.model.model, m.counts_tokens) for m in models] == [
        ("openai", "gpt-emu", True),
        ("openai-chat", "chat-emu", False),
        ("anthropic", "claude-emu", True),
    ]


async def test_health_and_auth(start_server, emu):
    config = emulator_config(emu)
    from dataclasses import replace

    config = replace(config, server=replace(config.server, auth_token="s3cret"))
    address = await start_server(build_server(config))
    async with grpc.aio.insecure_channel(address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="agentrt.v1.ModelGatewayService")
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = pb_grpc.ModelGatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListModels(pb.ListModelsRequest())
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        listed = await stub.ListModels(pb.ListModelsRequest(), metadata=[("authorization", "Bearer s3cret")])
        assert len(listed.models) == 3


async def test_anthropic_thinking_is_kept_and_replayed_with_its_signature(gateway, emu):
    emu.script([Reply(text="answer", thinking="deliberation"), Reply(text="next")])
    first = (await gateway.Generate(generate("anthropic"))).response
    thinking = first.content[0].thinking
    assert thinking.text == "deliberation" and thinking.signature.startswith("sig_")
    history = [user("q"), c.Message(role=c.ROLE_ASSISTANT, content=list(first.content)), user("go on")]
    await gateway.Generate(generate("anthropic", *history))
    sent = emu.requests[1][1]["messages"][1]["content"][0]
    assert sent == {"type": "thinking", "thinking": "deliberation", "signature": thinking.signature}
    assert json.dumps(emu.requests[1][1])  # the replayed request is plain JSON
