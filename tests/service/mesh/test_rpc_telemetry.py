"""Trace context and RPC metrics across real grpc.aio hops: MeshServer's interceptors on the
server side, open_channel's on the client side, for all four call kinds.

A test service (four methods over google.protobuf.StringValue) is served by the production
MeshServer, so the interceptor chain is the one every service has; the production
SessionService shows the same on a real service. Spans go to the SDK's in-memory exporter.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from google.protobuf import wrappers_pb2 as w
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from agentrt.client.channels import open_channel
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh import telemetry
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.server import MeshServer, MetricsPortInUseError, ServiceBinding
from agentrt.mesh.storage.db import sqlite_url
from agentrt.mesh.telemetry import tracing
from agentrt.mesh.telemetry.metrics import DURATION_BUCKETS
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server as build_sessions
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from tests.ports import free_port
from tests.tracing import recorded

SERVICE = "test.v1.EchoService"
_ser = w.StringValue.SerializeToString
_de = w.StringValue.FromString


def echo_binding(peer: list[grpc.aio.Channel] | None = None) -> ServiceBinding:
    """The four call kinds; a unary "relay" calls the next server through `peer[0]`."""

    async def unary(request: w.StringValue, context) -> w.StringValue:
        if request.value == "missing":
            raise MeshError(Status.NOT_FOUND, Reason.SESSION_NOT_FOUND, "no such thing")
        if request.value == "bug":
            raise RuntimeError("a bug")
        if request.value == "hang":
            await asyncio.Event().wait()
        if request.value == "relay" and peer:
            answer = await peer[0].unary_unary(f"/{SERVICE}/Unary", _ser, _de)(w.StringValue(value="next"))
            return w.StringValue(value="relayed " + answer.value)
        return w.StringValue(value="echo " + request.value)

    async def server_stream(request: w.StringValue, context):
        for i in range(int(request.value or "3")):
            yield w.StringValue(value=str(i))
        if request.value == "1":
            await asyncio.Event().wait()  # one message, then an open stream

    async def client_stream(requests, context) -> w.StringValue:
        return w.StringValue(value=",".join([r.value async for r in requests]))

    async def bidi(requests, context):
        async for r in requests:
            yield w.StringValue(value=r.value.upper())

    handlers = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary, _de, _ser),
            "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, _de, _ser),
            "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, _de, _ser),
            "Bidi": grpc.stream_stream_rpc_method_handler(bidi, _de, _ser),
        },
    )
    return ServiceBinding(SERVICE, lambda server: server.add_generic_rpc_handlers([handlers]))


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _requests(samples, method: str, code: str) -> float:
    labels = tuple(sorted({"service": SERVICE, "method": method, "code": code}.items()))
    return samples.get(("agentrt_rpc_server_requests_total", labels), 0.0)


async def _wait(predicate, what: str):
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


async def test_every_call_kind_carries_the_trace_to_the_server(start_server):
    with recorded() as rec:
        address = await start_server(MeshServer(ServerConfig(port=0), [echo_binding()]))
        channel = open_channel(address)
        parent_tracer = tracing.tracer()
        assert parent_tracer is not None
        try:
            with parent_tracer.start_as_current_span("caller") as caller:
                assert (
                    await channel.unary_unary(f"/{SERVICE}/Unary", _ser, _de)(w.StringValue(value="a"))
                ).value == "echo a"
                streamed = [
                    m.value
                    async for m in channel.unary_stream(f"/{SERVICE}/ServerStream", _ser, _de)(
                        w.StringValue(value="3")
                    )
                ]
                assert streamed == ["0", "1", "2"]

                async def values():
                    for v in ("x", "y"):
                        yield w.StringValue(value=v)

                joined = await channel.stream_unary(f"/{SERVICE}/ClientStream", _ser, _de)(values())
                assert joined.value == "x,y"
                upper = [
                    m.value async for m in channel.stream_stream(f"/{SERVICE}/Bidi", _ser, _de)(values())
                ]
                assert upper == ["X", "Y"]
            methods = ("Unary", "ServerStream", "ClientStream", "Bidi")
            await _wait(lambda: len(rec.spans) == 1 + 2 * len(methods), "both spans of every call")
        finally:
            await channel.close()
    trace_id = caller.get_span_context().trace_id
    for method in methods:
        name = f"{SERVICE}/{method}"
        client = [s for s in rec.spans if s.name == name and s.kind == SpanKind.CLIENT]
        server = [s for s in rec.spans if s.name == name and s.kind == SpanKind.SERVER]
        assert len(client) == 1 and len(server) == 1, method
        assert client[0].context.trace_id == server[0].context.trace_id == trace_id
        assert client[0].parent.span_id == caller.get_span_context().span_id
        assert server[0].parent.span_id == client[0].context.span_id and server[0].parent.is_remote
        assert server[0].attributes["rpc.method"] == method and server[0].attributes["rpc.service"] == SERVICE
        assert (
            server[0].attributes["rpc.grpc.status_code"] == 0 == client[0].attributes["rpc.grpc.status_code"]
        )
        assert client[0].attributes["server.address"] == "127.0.0.1"
        assert server[0].attributes["network.peer.address"] == "127.0.0.1"


async def test_a_chain_of_servers_is_one_trace_with_each_hop_parented(start_server):
    with recorded() as rec:
        last = await start_server(MeshServer(ServerConfig(port=0), [echo_binding()]))
        onward = [open_channel(last)]
        first = await start_server(MeshServer(ServerConfig(port=0), [echo_binding(onward)]))
        channel = open_channel(first)
        try:
            answer = await channel.unary_unary(f"/{SERVICE}/Unary", _ser, _de)(w.StringValue(value="relay"))
            assert answer.value == "relayed echo next"
            await _wait(lambda: len(rec.spans) == 4, "four spans")
        finally:
            await channel.close()
            await onward[0].close()
    by_kind = sorted(rec.spans, key=lambda s: s.start_time)
    assert [s.kind for s in by_kind] == [SpanKind.CLIENT, SpanKind.SERVER, SpanKind.CLIENT, SpanKind.SERVER]
    assert len({s.context.trace_id for s in by_kind}) == 1
    for parent, child in zip(by_kind, by_kind[1:], strict=False):
        assert child.parent.span_id == parent.context.span_id
    assert by_kind[0].parent is None  # no span was current in the test: the first call starts the trace


async def test_failures_are_recorded_with_their_status_on_both_sides(start_server):
    with recorded() as rec:
        address = await start_server(MeshServer(ServerConfig(port=0), [echo_binding()]))
        channel = open_channel(address)
        unary = channel.unary_unary(f"/{SERVICE}/Unary", _ser, _de)
        try:
            for value, code in (("missing", grpc.StatusCode.NOT_FOUND), ("bug", grpc.StatusCode.INTERNAL)):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await unary(w.StringValue(value=value))
                assert info.value.code() == code
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await unary(w.StringValue(value="hang"), timeout=0.2)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            await _wait(
                lambda: len([s for s in rec.spans if s.kind == SpanKind.SERVER]) == 3, "three server spans"
            )
        finally:
            await channel.close()
    servers = sorted((s for s in rec.spans if s.kind == SpanKind.SERVER), key=lambda s: s.start_time)
    clients = sorted((s for s in rec.spans if s.kind == SpanKind.CLIENT), key=lambda s: s.start_time)
    assert [s.attributes["rpc.grpc.status_code"] for s in servers] == [5, 13, 4]
    assert [s.attributes["rpc.grpc.status_code"] for s in clients] == [5, 13, 4]
    # server spans: ERROR only for the server's faults (INTERNAL, DEADLINE_EXCEEDED), not NOT_FOUND
    assert [s.status.status_code for s in servers] == [StatusCode.UNSET, StatusCode.ERROR, StatusCode.ERROR]
    assert all(s.status.status_code == StatusCode.ERROR for s in clients)


async def test_a_stream_left_early_ends_its_client_span_at_the_cancel(start_server):
    with recorded() as rec:
        address = await start_server(MeshServer(ServerConfig(port=0), [echo_binding()]))
        channel = open_channel(address)
        try:
            call = channel.unary_stream(f"/{SERVICE}/ServerStream", _ser, _de)(w.StringValue(value="1"))
            async for message in call:
                assert message.value == "0"
                break
            call.cancel()
            await _wait(lambda: len(rec.spans) == 2, "the client and server spans of the canceled stream")
        finally:
            await channel.close()
    client = next(s for s in rec.spans if s.kind == SpanKind.CLIENT)
    server = next(s for s in rec.spans if s.kind == SpanKind.SERVER)
    assert client.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert server.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert server.status.status_code == StatusCode.UNSET  # the caller's choice, not a server fault


async def test_health_is_counted_but_never_traced(start_server):
    with recorded() as rec:
        port = free_port()
        address = await start_server(MeshServer(ServerConfig(port=0, metrics_port=port), [echo_binding()]))
        channel = open_channel(address)
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await channel.close()
        samples = await asyncio.to_thread(scrape, port)
    assert [s.kind for s in rec.spans] == [SpanKind.CLIENT]  # this process's own call only
    labels = tuple(sorted({"service": "grpc.health.v1.Health", "method": "Check", "code": "OK"}.items()))
    assert samples[("agentrt_rpc_server_requests_total", labels)] == 1


async def test_metrics_count_calls_by_method_and_code_with_durations(start_server):
    port = free_port()
    server = MeshServer(ServerConfig(port=0, metrics_port=port), [echo_binding()])
    address = await start_server(server)
    assert server.metrics_port == port
    channel = open_channel(address)
    unary = channel.unary_unary(f"/{SERVICE}/Unary", _ser, _de)
    try:
        for _ in range(3):
            await unary(w.StringValue(value="ok"))
        with pytest.raises(grpc.aio.AioRpcError):
            await unary(w.StringValue(value="missing"))
        assert [
            m.value
            async for m in channel.unary_stream(f"/{SERVICE}/ServerStream", _ser, _de)(
                w.StringValue(value="2")
            )
        ] == ["0", "1"]
        open_stream = channel.unary_stream(f"/{SERVICE}/ServerStream", _ser, _de)(w.StringValue(value="1"))
        await open_stream.read()
        samples = await asyncio.to_thread(scrape, port)
        in_flight = tuple(sorted({"service": SERVICE, "method": "ServerStream"}.items()))
        assert samples[("agentrt_rpc_server_in_flight", in_flight)] == 1  # the open stream
        open_stream.cancel()
    finally:
        await channel.close()
    assert _requests(samples, "Unary", "OK") == 3
    assert _requests(samples, "Unary", "NOT_FOUND") == 1
    assert _requests(samples, "ServerStream", "OK") == 1
    count = tuple(sorted({"service": SERVICE, "method": "Unary", "code": "OK"}.items()))
    assert samples[("agentrt_rpc_server_duration_seconds_count", count)] == 3
    buckets = {
        dict(labels).get("le")
        for (name, labels) in samples
        if name == "agentrt_rpc_server_duration_seconds_bucket"
    }
    assert {str(b) for b in DURATION_BUCKETS} <= buckets and "+Inf" in buckets


async def test_a_taken_metrics_port_is_refused_naming_it(start_server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = MeshServer(ServerConfig(port=0, metrics_port=taken.getsockname()[1]), [echo_binding()])
        try:
            with pytest.raises(MetricsPortInUseError) as info:
                await server.start()
            assert info.value.port == taken.getsockname()[1]
        finally:
            await server.stop(grace=0)


_KINDS = (
    "_unary_unary_interceptors",
    "_unary_stream_interceptors",
    "_stream_unary_interceptors",
    "_stream_stream_interceptors",
)


def _interceptors(channel: grpc.aio.Channel) -> list[list]:
    """grpc.aio's per-kind interceptor lists of a channel."""
    return [getattr(channel, kind) for kind in _KINDS]


async def test_without_tracing_a_channel_has_no_tracing_interceptor(start_server):
    assert not telemetry.tracing_enabled()
    address = await start_server(MeshServer(ServerConfig(port=0), [echo_binding()]))
    untraced = open_channel(address)
    with recorded():
        traced = open_channel(address)
    try:
        assert _interceptors(untraced) == [[], [], [], []]
        assert all(len(kind) == 1 for kind in _interceptors(traced))
        # tracing turned off since: the traced channel's interceptors pass calls through
        assert (
            await traced.unary_unary(f"/{SERVICE}/Unary", _ser, _de)(w.StringValue(value="q"))
        ).value == "echo q"
        assert (
            await untraced.unary_unary(f"/{SERVICE}/Unary", _ser, _de)(w.StringValue(value="r"))
        ).value == "echo r"
    finally:
        await untraced.close()
        await traced.close()


async def test_the_session_service_joins_the_callers_trace(start_server, tmp_path):
    with recorded() as rec:
        config = SessionsConfig(server=ServerConfig(port=0, db_url=sqlite_url(str(tmp_path), "sessions")))
        address = await start_server(build_sessions(config))
        channel = open_channel(address, tenant="acme")
        stub = spb_grpc.SessionServiceStub(channel)
        parent_tracer = tracing.tracer()
        assert parent_tracer is not None
        try:
            with parent_tracer.start_as_current_span("turn") as turn:
                created = await stub.CreateSession(spb.CreateSessionRequest())
                with pytest.raises(grpc.aio.AioRpcError):
                    await stub.GetSession(
                        spb.GetSessionRequest(session=spb.SessionRef(session_id="s_missing"))
                    )
            await _wait(
                lambda: len([s for s in rec.spans if s.kind == SpanKind.SERVER]) == 2, "two server spans"
            )
        finally:
            await channel.close()
    assert created.session.session_id
    servers = {s.name: s for s in rec.spans if s.kind == SpanKind.SERVER}
    get = servers["agentrt.v1.SessionService/GetSession"]
    assert get.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert {s.context.trace_id for s in servers.values()} == {turn.get_span_context().trace_id}


_GLOBAL_PROVIDER_PROGRAM = """
import asyncio, grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.server import MeshServer
from tests.service.mesh.test_rpc_telemetry import SERVICE, _de, _ser, echo_binding

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the program's own OpenTelemetry setup, nothing of ours

async def main():
    server = MeshServer(ServerConfig(port=0), [echo_binding()])
    port = await server.start()
    channel = open_channel(f"127.0.0.1:{port}")
    with trace.get_tracer("program").start_as_current_span("program"):
        await channel.unary_unary(f"/{SERVICE}/Unary", _ser, _de)(_de(b""))
    await channel.close()
    await server.stop(0)

asyncio.run(main())
spans = exporter.get_finished_spans()
print(sorted(f"{s.kind.name}:{s.name}" for s in spans), len({s.context.trace_id for s in spans}))
"""


def test_a_program_with_its_own_global_provider_is_traced_through_it():
    """A client program that set OpenTelemetry's global provider (not ours) gets the RPC spans."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER_PROGRAM], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = f"['CLIENT:{SERVICE}/Unary', 'INTERNAL:program', 'SERVER:{SERVICE}/Unary'] 1"
    assert done.stdout.strip().splitlines()[-1] == expected
