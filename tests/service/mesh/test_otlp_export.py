"""`configure_tracing` exports through the SDK's real OTLP exporters, over gRPC and over HTTP,
to an in-test collector; `shutdown_tracing` flushes what is queued."""

from __future__ import annotations

import pytest

from agentrt.mesh import telemetry
from agentrt.mesh.telemetry import TracingConfig, configure_tracing, shutdown_tracing
from tests.emulators.otlp import OtlpCollector


@pytest.fixture
def collector():
    with OtlpCollector() as running:
        yield running


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_spans_reach_the_collector_over_either_protocol(collector, protocol):
    endpoint = collector.grpc_endpoint if protocol == "grpc" else collector.http_endpoint + "/v1/traces"
    config = TracingConfig(exporters=("otlp",), protocol=protocol, endpoint=endpoint)
    try:
        assert configure_tracing(config, "tools")
        with telemetry.sandbox_command_span(backend="bwrap", run_id="run-1", call_id="call-1") as span:
            span.set_content("agentrt.sandbox.command", "echo secret")
            span.set_exit(exit_code=0)
    finally:
        shutdown_tracing()  # the batch processor's queue is flushed here
    (received,) = collector.spans
    assert received.service == "agentrt-tools" and received.name == "sandbox command"
    assert received.attributes["agentrt.run.id"] == "run-1" and received.attributes["process.exit.code"] == 0
    assert "agentrt.sandbox.command" not in received.attributes  # content was not opted into
    assert not telemetry.tracing_enabled()


def test_content_and_service_name_follow_the_config(collector):
    config = TracingConfig(
        exporters=("otlp",), endpoint=collector.grpc_endpoint, service_name="tools-eu", record_content=True
    )
    try:
        configure_tracing(config, "tools")
        with telemetry.sandbox_command_span(backend="docker") as span:
            span.set_content("agentrt.sandbox.command", "ls -la")
    finally:
        shutdown_tracing()
    (received,) = collector.spans
    assert received.service == "tools-eu" and received.attributes["agentrt.sandbox.command"] == "ls -la"


def test_a_config_without_exporters_turns_tracing_off():
    assert not configure_tracing(TracingConfig(), "runs")
    assert not telemetry.tracing_enabled()
    shutdown_tracing()  # nothing to flush: no error


def test_unknown_exporters_and_protocols_are_refused():
    with pytest.raises(ValueError, match="trace exporter 'jaeger'"):
        TracingConfig(exporters=("jaeger",))
    with pytest.raises(ValueError, match="OTLP protocol 'http/json'"):
        TracingConfig(exporters=("otlp",), protocol="http/json")
