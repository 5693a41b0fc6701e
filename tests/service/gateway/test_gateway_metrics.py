"""Token usage and failures as Prometheus metrics, scraped over HTTP from a real gateway server."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from dataclasses import replace

import grpc
import pytest
from gateway_helpers import emulator_config, generate, model_request
from prometheus_client.parser import text_string_to_metric_families

from agentrt.gateway.config import GatewayConfig
from agentrt.gateway.metrics import GatewayMetrics, Gauge
from agentrt.gateway.server import build_server
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.server import PortInUseError
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ErrorReply, Reply
from tests.ports import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


async def scrape(port: int) -> Samples:
    """GET /metrics over HTTP and index every sample by (name, sorted labels)."""
    text = await asyncio.to_thread(_scrape_text, port)
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """Return one sample's value; 0 when the series does not exist."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def tokens(samples: Samples, tenant: str, provider: str, model: str) -> tuple[float, ...]:
    call = {"tenant": tenant, "provider": provider, "model": model}
    return tuple(
        value(samples, f"agentrt_gateway_{kind}_tokens_total", **call)
        for kind in ("input", "output", "cached_input", "reasoning")
    )


@pytest.fixture
async def served(start_server, emu):
    """A gateway serving /metrics on a port of its own; yields (stub, metrics port)."""
    port = free_port()
    address = await start_server(build_server(emulator_config(emu, metrics_port=port)))
    async with grpc.aio.insecure_channel(address) as channel:
        yield pb_grpc.ModelGatewayServiceStub(channel), port


async def test_token_usage_per_tenant_and_model_is_exact(served, emu):
    stub, port = served
    emu.script(
        [
            Reply(text="a", input_tokens=120, output_tokens=30, cached_tokens=40, reasoning_tokens=7),
            Reply(text="b", input_tokens=80, output_tokens=10, cached_tokens=0, reasoning_tokens=3),
            Reply(text="c", input_tokens=55, output_tokens=9, cached_tokens=15),
            Reply(text="d", input_tokens=11, output_tokens=2),
        ]
    )
    # tenant "acme" by the mesh header; tenant "globex" by the request's own tenant field
    acme = [(TENANT_HEADER, "acme")]
    await stub.Generate(generate("openai"), metadata=acme)
    await stub.Generate(generate("openai"), metadata=acme)
    streamed = [
        i
        async for i in stub.StreamGenerate(
            pb.StreamGenerateRequest(request=model_request("anthropic")), metadata=acme
        )
    ]
    assert streamed[-1].final.response.usage.input_tokens == 55
    other = generate("openai-chat")
    other.request.tenant = "globex"
    await stub.Generate(other)

    samples = await scrape(port)
    assert tokens(samples, "acme", "openai", "gpt-emu") == (200, 40, 40, 10)
    assert tokens(samples, "acme", "anthropic", "claude-emu") == (55, 9, 15, 0)
    assert tokens(samples, "globex", "openai-chat", "chat-emu") == (11, 2, 0, 0)
    assert tokens(samples, "globex", "openai", "gpt-emu") == (0, 0, 0, 0)
    requests = "agentrt_gateway_requests_total"
    assert (
        value(
            samples, requests, tenant="acme", provider="openai", model="gpt-emu", rpc="Generate", outcome="ok"
        )
        == 2
    )
    assert (
        value(
            samples,
            requests,
            tenant="acme",
            provider="anthropic",
            model="claude-emu",
            rpc="StreamGenerate",
            outcome="ok",
        )
        == 1
    )
    wait = "agentrt_gateway_limiter_queue_wait_seconds_count"
    assert value(samples, wait, provider="openai", model="gpt-emu") == 2


async def test_errors_count_by_reason_and_retries_by_tenant(served, emu):
    stub, port = served
    tenant = [(TENANT_HEADER, "acme")]
    emu.script(
        [
            ErrorReply(status=429, retry_after=0.01),
            ErrorReply(status=429, retry_after=0.01),
            ErrorReply(status=429, retry_after=0.01),  # retries spent: RATE_LIMITED
            ErrorReply(status=400, kind="context_overflow"),
            ErrorReply(status=400),  # a plain bad request is not an overflow
            ErrorReply(status=529),
            Reply(text="recovered"),  # one 529 retried, then answered
            Reply(text="I can't help with that.", stop="refusal"),
            Reply(text="cut", stop="context_window"),  # Anthropic's success-shaped overflow
        ]
    )
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Generate(generate("openai"), metadata=tenant)
    assert (await stub.Generate(generate("openai"), metadata=tenant)).retries == 1
    refused = await stub.Generate(generate("openai-chat"), metadata=tenant)
    assert refused.response.refusal
    with pytest.raises(grpc.aio.AioRpcError):  # the success-shaped overflow is an error (004 §2.5g)
        await stub.Generate(generate("anthropic"), metadata=tenant)
    unknown = generate("openai")
    unknown.request.model.provider = "gemini"
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Generate(unknown, metadata=tenant)
    with pytest.raises(grpc.aio.AioRpcError):  # refused by the adapter, never sent
        await stub.Generate(generate("openai", output_json_schema='{"type": "object"}'), metadata=tenant)

    samples = await scrape(port)
    openai = {"tenant": "acme", "provider": "openai", "model": "gpt-emu"}
    errors = "agentrt_gateway_errors_total"
    assert value(samples, errors, **openai, reason="rate_limited", origin="provider") == 1
    assert value(samples, errors, **openai, reason="context_overflow", origin="provider") == 1
    assert value(samples, errors, **openai, reason="invalid_request", origin="provider") == 1
    assert value(samples, errors, **openai, reason="unavailable", origin="provider") == 0
    chat = {"tenant": "acme", "provider": "openai-chat", "model": "chat-emu"}
    assert value(samples, errors, **chat, reason="refusal", origin="provider") == 1
    claude = {"tenant": "acme", "provider": "anthropic", "model": "claude-emu"}
    assert value(samples, errors, **claude, reason="context_overflow", origin="provider") == 1
    assert (
        value(
            samples,
            errors,
            tenant="acme",
            provider="unknown",
            model="",
            reason="unknown_provider",
            origin="gateway",
        )
        == 1
    )
    assert value(samples, errors, **openai, reason="unsupported_capability", origin="gateway") == 1
    retries = "agentrt_gateway_retries_total"
    assert value(samples, retries, **openai, reason="rate_limited") == 2
    assert value(samples, retries, **openai, reason="unavailable") == 1
    requests = "agentrt_gateway_requests_total"
    assert value(samples, requests, **openai, rpc="Generate", outcome="error") == 4
    assert value(samples, requests, **openai, rpc="Generate", outcome="ok") == 1
    # the refused and the window-stopped answers still report their usage
    assert tokens(samples, "acme", "openai-chat", "chat-emu")[0] == 10


async def test_stream_failures_and_cancellations_are_counted(served, emu):
    stub, port = served
    emu.script(
        [
            ErrorReply(status=429, retry_after=0.01),  # retried before the first delta
            Reply(text="a partial answer", stream_cut=True),
            Reply(text="x" * 400, chunk_chars=4, event_delay=0.02),
        ]
    )
    with pytest.raises(grpc.aio.AioRpcError):
        async for _ in stub.StreamGenerate(pb.StreamGenerateRequest(request=model_request("openai"))):
            pass
    call = stub.StreamGenerate(pb.StreamGenerateRequest(request=model_request("openai")))
    await call.read()
    call.cancel()
    labels = {"tenant": "default", "provider": "openai", "model": "gpt-emu", "rpc": "StreamGenerate"}
    requests = "agentrt_gateway_requests_total"
    for _ in range(500):  # bounded poll for the observable state: the server saw the cancellation
        samples = await scrape(port)
        if value(samples, requests, **labels, outcome="canceled"):
            break
        await asyncio.sleep(0.01)
    assert value(samples, requests, **labels, outcome="canceled") == 1
    assert value(samples, requests, **labels, outcome="error") == 1
    errors = "agentrt_gateway_errors_total"
    assert (
        value(
            samples,
            errors,
            tenant="default",
            provider="openai",
            model="gpt-emu",
            reason="unavailable",
            origin="provider",
        )
        == 1
    )
    assert tokens(samples, "default", "openai", "gpt-emu") == (0, 0, 0, 0)
    retries = "agentrt_gateway_retries_total"
    assert (
        value(samples, retries, tenant="default", provider="openai", model="gpt-emu", reason="rate_limited")
        == 1
    )


async def test_two_gateways_in_one_process_keep_separate_counts(start_server, emu):
    ports = [free_port(), free_port()]
    addresses = [await start_server(build_server(emulator_config(emu, metrics_port=p))) for p in ports]
    emu.script([Reply(text="only one", input_tokens=9)])
    async with grpc.aio.insecure_channel(addresses[0]) as channel:
        await pb_grpc.ModelGatewayServiceStub(channel).Generate(generate("openai"))
    first, second = await scrape(ports[0]), await scrape(ports[1])
    assert tokens(first, "default", "openai", "gpt-emu")[0] == 9
    assert tokens(second, "default", "openai", "gpt-emu")[0] == 0


async def test_metrics_endpoint_is_off_by_default_and_a_taken_port_is_refused(start_server, emu, monkeypatch):
    monkeypatch.delenv("AGENTRT_GATEWAY_METRICS_PORT", raising=False)
    assert GatewayConfig.from_env().server.metrics_port == 0
    monkeypatch.setenv("AGENTRT_GATEWAY_METRICS_PORT", "9464")
    assert GatewayConfig.from_env().server.metrics_port == 9464
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = emulator_config(emu, metrics_port=taken.getsockname()[1])
        server = build_server(config)
        try:
            with pytest.raises(PortInUseError) as info:
                await start_server(server)
            assert getattr(info.value, "port", None) == taken.getsockname()[1]  # the metrics port, named
        finally:
            await server.stop(grace=0)  # start failed after binding the gRPC port (as serve_forever does)


async def test_the_endpoint_stops_with_the_server(start_server, emu):
    port = free_port()
    server = build_server(emulator_config(emu, metrics_port=port))
    await start_server(server)
    assert "# TYPE agentrt_gateway_requests_total counter" in await asyncio.to_thread(_scrape_text, port)
    await server.stop(grace=0)
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(_scrape_text, port)


def test_gauge_readers_are_read_at_each_scrape():
    metrics = GatewayMetrics()
    budget = {"value": 1000.0}

    def reader() -> list[Gauge]:
        return [
            Gauge(
                "limiter_budget_tokens_per_minute",
                "Current input-token budget per minute.",
                budget["value"],
                {"provider": "openai", "model": "gpt-emu"},
            )
        ]

    metrics.add_gauge_reader(reader)
    line = 'agentrt_gateway_limiter_budget_tokens_per_minute{model="gpt-emu",provider="openai"} 1000.0'
    assert line in metrics.exposition().decode()
    budget["value"] = 500.0
    assert line.replace("1000.0", "500.0") in metrics.exposition().decode()


async def test_limiter_budget_is_exposed_as_gauges(served, emu):
    """The configured limiter's bucket (budget, used, pending) appears at the next scrape."""
    stub, port = served
    emu.script([Reply(text="ok", input_tokens=42, output_tokens=1)])
    await stub.Generate(generate("openai"))
    samples = await scrape(port)
    # One budget for every tenant (not per tenant): tenant "*", which no tenant can be called.
    labels = {"provider": "openai", "family": "gpt-emu", "tenant": "*"}
    assert value(samples, "agentrt_gateway_limiter_budget_tokens", **labels) == 4_000_000
    # After settling, the window holds exactly the provider-reported input tokens, none pending.
    assert value(samples, "agentrt_gateway_limiter_used_tokens", **labels) == 42
    assert value(samples, "agentrt_gateway_limiter_pending_tokens", **labels) == 0
    assert ("agentrt_gateway_limiter_state_age_seconds", tuple(sorted(labels.items()))) in samples


async def test_limiter_gauges_age_out_and_name_tenants_like_the_other_metrics(start_server, emu):
    """Per-tenant budgets are labelled with the charged tenant; usage leaves with its window."""
    port = free_port()
    limiter = replace(
        GatewayConfig().limiter, per_tenant=True, window_seconds=0.5, guard_seconds=0.0, cooldown_seconds=0.0
    )
    address = await start_server(build_server(emulator_config(emu, metrics_port=port, limiter=limiter)))
    emu.script([Reply(text="ok", input_tokens=42, output_tokens=1)])
    async with grpc.aio.insecure_channel(address) as channel:
        await pb_grpc.ModelGatewayServiceStub(channel).Generate(generate("openai"))
    labels = {"provider": "openai", "family": "gpt-emu", "tenant": "default"}
    used = "agentrt_gateway_limiter_used_tokens"
    samples = await scrape(port)
    assert tokens(samples, "default", "openai", "gpt-emu")[0] == 42  # the same tenant label
    # the used gauge shows the window's tokens, then nothing once the window has passed
    # (polled: the test waits for the state, not for a time)
    seen = [value(samples, used, **labels)]
    for _ in range(200):
        if seen[-1] == 0:
            break
        await asyncio.sleep(0.05)
        samples = await scrape(port)
        seen.append(value(samples, used, **labels))
    assert seen[0] in (0, 42) and seen[-1] == 0, seen
    assert value(samples, "agentrt_gateway_limiter_budget_tokens", **labels) > 0
    assert value(samples, "agentrt_gateway_limiter_state_age_seconds", **labels) >= 0.5


async def test_a_rejected_body_tenant_mints_no_series(served, emu):
    """Malformed body tenants are refused and counted under the caller's own (header) tenant."""
    stub, port = served
    bad = ["x" * 5000, "a\nb", *(f"t{i}\n" for i in range(5))]
    for i, tenant in enumerate(bad):
        request = generate("openai")
        request.request.tenant = tenant
        metadata = [(TENANT_HEADER, "acme")] if i % 2 else None
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generate(request, metadata=metadata)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    samples = await scrape(port)
    tenants = {dict(labels).get("tenant") for _, labels in samples} - {None}
    assert tenants == {"default", "acme"}
    errors = "agentrt_gateway_errors_total"
    call = {"provider": "openai", "model": "gpt-emu", "reason": "invalid_id", "origin": "gateway"}
    assert value(samples, errors, tenant="default", **call) == 4
    assert value(samples, errors, tenant="acme", **call) == 3
