"""The limiter inside the gateway: what is reserved, refusals, feedback from the provider.

The production build_server with an in-process limiter handed in (so its state can be
read), every remote adapter against the wire emulator. The emulator's rate-limit mode
counts each request's input with its own deterministic counter and reports that count as
the usage, which is what settling must end up with.
"""

from __future__ import annotations

from dataclasses import replace

import grpc
import pytest
from gateway_helpers import REMOTE, emulator_config, generate, model_request, user

from agentrt.gateway.limiter import AdaptiveTokenLimiter, LimiterKey, LimiterSettings
from agentrt.gateway.limiter.count import input_token_bound
from agentrt.gateway.limiter.memory import MemoryStore
from agentrt.gateway.server import build_server
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import details_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ErrorReply, RateLimit, Reply

MODELS = {"openai": "gpt-emu", "openai-chat": "chat-emu", "anthropic": "claude-emu"}


def limiter(**figures: object) -> AdaptiveTokenLimiter:
    base: dict = {"initial_tokens": 100_000, "max_tokens": 200_000, "floor_tokens": 1000}
    settings = LimiterSettings(**{**base, **figures})
    return AdaptiveTokenLimiter(MemoryStore(settings), settings)


async def open_gateway(start_server, emu, lim: AdaptiveTokenLimiter, **config: object):
    address = await start_server(build_server(emulator_config(emu, **config), lim))
    channel = grpc.aio.insecure_channel(address)
    return channel, pb_grpc.ModelGatewayServiceStub(channel)


def long_request(provider: str) -> pb.ModelRequest:
    """A transcript with tools, a tool call and its result, and non-ASCII text."""
    call = c.ContentBlock(
        tool_use=c.ToolCall(call_id="call_1", name="exec_command", arguments='{"cmd": "ls"}')
    )
    result = c.ContentBlock(
        tool_result=c.ToolResult(call_id="call_1", name="exec_command", content="a.txt\nb.txt\n" * 20)
    )
    return model_request(
        provider,
        user("Liste les fichiers, s'il te plaît — «vite» ☕ " * 10),
        c.Message(role=c.ROLE_ASSISTANT, content=[call]),
        c.Message(role=c.ROLE_USER, content=[result]),
        user("and now write out.txt"),
    )


@pytest.mark.parametrize("provider", REMOTE)
@pytest.mark.parametrize("shape", ["short", "long"])
async def test_the_reserved_bound_covers_the_count_and_settling_leaves_the_usage(
    start_server, emu, provider, shape
):
    emu.rate_limit = RateLimit(tokens=10_000_000)
    lim = limiter()
    channel, stub = await open_gateway(start_server, emu, lim)
    request = model_request(provider) if shape == "short" else long_request(provider)
    async with channel:
        out = await stub.Generate(pb.GenerateRequest(request=request))
    ((_, counted, accepted),) = emu.intake
    assert accepted and out.response.usage.input_tokens == counted
    assert counted <= input_token_bound(request)
    state = await lim.state(LimiterKey("", provider, MODELS[provider]))
    assert (state.used_tokens, state.pending_tokens) == (counted, 0)


async def test_a_spent_budget_is_the_gateways_resource_exhausted_with_retry_info(start_server, emu):
    lim = limiter(initial_tokens=5000, max_tokens=5000, floor_tokens=500)
    channel, stub = await open_gateway(start_server, emu, lim)
    emu.script([Reply(text="one", input_tokens=4500)])
    request = model_request("anthropic")
    request.max_queue_wait.FromMilliseconds(100)
    async with channel:
        await stub.Generate(pb.GenerateRequest(request=request))  # settles at 4500; the next bound is ~930
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generate(pb.GenerateRequest(request=request))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    reason, metadata, retry_after = details_of(info.value)
    assert reason == "RATE_LIMITED" and metadata["limiter"] == "gateway" and "http_status" not in metadata
    assert retry_after is not None and 55 < retry_after <= 61
    assert [path for path, _ in emu.requests] == ["/v1/messages"]


async def test_a_request_over_the_whole_budget_fails_at_once_without_calling(start_server, emu):
    lim = limiter(initial_tokens=500, max_tokens=500, floor_tokens=100)
    channel, stub = await open_gateway(start_server, emu, lim)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generate(generate("openai-chat", user("x" * 2000)))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    reason, _, retry_after = details_of(info.value)
    assert reason == "RATE_LIMITED" and retry_after is None
    assert "can never be admitted" in info.value.details()
    assert emu.requests == []


async def test_a_bound_over_the_budget_is_recounted_exactly_where_the_provider_can(start_server, emu):
    lim = limiter(initial_tokens=2000, max_tokens=2000, floor_tokens=100)
    channel, stub = await open_gateway(start_server, emu, lim)
    emu.script([Reply(text="fits")])
    request = model_request("openai", user("y" * 3000), tools=False)  # bound > 3000, count ~ 800
    async with channel:
        out = await stub.Generate(pb.GenerateRequest(request=request))
    assert out.response.content[0].text.text == "fits"
    assert [path for path, _ in emu.requests] == ["/v1/responses/input_tokens", "/v1/responses"]


async def test_exact_count_mode_reserves_the_providers_count(start_server, emu):
    lim = limiter(exact_count=True)
    reserved_sizes: dict[str, int] = {}
    reserve = lim.reserve

    async def recording_reserve(key, tokens, max_wait_seconds):
        reserved_sizes[key.provider] = tokens
        return await reserve(key, tokens, max_wait_seconds)

    lim.reserve = recording_reserve  # type: ignore[method-assign]
    channel, stub = await open_gateway(start_server, emu, lim)
    emu.token_count = 1234
    emu.script([Reply(text="ok", input_tokens=1200)])
    async with channel:
        await stub.Generate(generate("openai"))
        emu.script([Reply(text="ok")])
        await stub.Generate(generate("anthropic"))  # an estimate only: the bound is reserved
    paths = [path for path, _ in emu.requests]
    assert paths == ["/v1/responses/input_tokens", "/v1/responses", "/v1/messages"]
    assert reserved_sizes["openai"] == 1234  # the provider's count was reserved
    assert (await lim.state(LimiterKey("", "openai", "gpt-emu"))).used_tokens == 1200  # settled
    seen = {state.provider: state for state in lim.snapshot()}
    assert seen["openai"].used_tokens == 1200 and seen["openai"].pending_tokens == 0


async def test_provider_throttling_halves_the_budget_and_answers_probe_it_back(start_server, emu):
    lim = limiter(cooldown_seconds=0.0)
    channel, stub = await open_gateway(start_server, emu, lim)
    emu.script([ErrorReply(429, retry_after=0.01), Reply(text="ok")])
    async with channel:
        out = await stub.Generate(generate("openai"))
        assert out.retries == 1
        key = LimiterKey("", "openai", "gpt-emu")
        # halved by the 429 (100,000 -> 50,000), then +2% of 200,000 for the answer
        assert (await lim.state(key)).budget_tokens == 54_000
        emu.script([ErrorReply(500), Reply(text="ok")])
        await stub.Generate(generate("openai"))  # a retried 5xx is no throttling
        assert (await lim.state(key)).budget_tokens == 58_000


async def test_a_provider_refusal_settles_to_nothing(start_server, emu):
    lim = limiter()
    channel, stub = await open_gateway(start_server, emu, lim, max_retries=0)
    emu.script([ErrorReply(400)])
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Generate(generate("anthropic"))
    state = await lim.state(LimiterKey("", "anthropic", "claude-emu"))
    assert (state.used_tokens, state.pending_tokens) == (0, 0)


async def test_the_configured_limiter_is_built_from_config(start_server, emu):
    # No limiter handed in: build_server makes the configured one (memory here).
    settings = LimiterSettings(initial_tokens=300, max_tokens=300, floor_tokens=30)
    address = await start_server(build_server(replace(emulator_config(emu), limiter=settings)))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ModelGatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generate(generate("anthropic"))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details_of(info.value)[1]["budget_tokens"] == "300"


async def test_per_tenant_budgets_are_kept_for_resolved_tenants_only(start_server, emu):
    """A malformed body tenant makes no bucket; the header, else the body, names the tenant."""
    lim = limiter(per_tenant=True)
    channel, stub = await open_gateway(start_server, emu, lim)
    async with channel:
        for tenant in ("x" * 5000, "a\nb", *(f"t{i}\n" for i in range(10))):
            request = generate("openai")
            request.request.tenant = tenant
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Generate(request)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert lim.snapshot() == []
        emu.script([Reply(text="a"), Reply(text="b"), Reply(text="c")])
        body_only = generate("openai")
        body_only.request.tenant = "globex"
        await stub.Generate(body_only)
        await stub.Generate(generate("openai"), metadata=[(TENANT_HEADER, "acme")])
        await stub.Generate(generate("openai"))
    assert sorted(s.tenant for s in lim.snapshot()) == ["acme", "default", "globex"]
