"""The edge's reading of OTEL_* and AGENTRT_* telemetry settings (mesh/config.py)."""

from __future__ import annotations

import pytest

from agentrt.gateway.config import GatewayConfig
from agentrt.mesh.config import edge_from_env, logging_from_env, metrics_port_from_env, tracing_from_env
from agentrt.runs.config import RunsConfig
from agentrt.sessions.config import SessionsConfig
from agentrt.tasks.config import TasksConfig
from agentrt.tools.config import ToolsConfig

OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "AGENTRT_TRACE_CONTENT",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)


def test_tracing_is_off_by_default():
    config = tracing_from_env()
    assert not config.enabled and config.exporters == () and not config.record_content


@pytest.mark.parametrize(
    ("env", "exporters", "protocol"),
    [
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",), "grpc"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ("otlp", "console"), "grpc"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, ("otlp",), "grpc"),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            ("otlp",),
            "http/protobuf",
        ),
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            ("otlp",),
            "http/protobuf",
        ),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, (), "grpc"),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, (), "grpc"),
    ],
    ids=["otlp", "two", "endpoint-alone", "http", "traces-protocol-wins", "none-wins", "sdk-disabled"],
)
def test_exporters_follow_the_standard_variables(monkeypatch, env, exporters, protocol):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = tracing_from_env()
    assert (config.exporters, config.protocol) == (exporters, protocol)


def test_service_name_and_content_opt_in(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "runs-eu")
    monkeypatch.setenv("AGENTRT_TRACE_CONTENT", "true")
    config = tracing_from_env()
    assert config.service_name == "runs-eu" and config.record_content


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            "OTEL_TRACES_EXPORTER='zipkin': 'zipkin' is not one of otlp, console",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "'http/json' is not one of grpc",
        ),
        ({"AGENTRT_TRACE_CONTENT": "perhaps"}, "AGENTRT_TRACE_CONTENT='perhaps' is not a boolean"),
    ],
)
def test_bad_tracing_settings_are_refused_by_name(monkeypatch, env, words):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        tracing_from_env()


def test_logging_settings(monkeypatch):
    for name in ("AGENTRT_LOG_LEVEL", "AGENTRT_LOG_FORMAT", "AGENTRT_LOG_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    default = logging_from_env()
    assert (default.level, default.format, default.content) == ("INFO", "text", False)
    monkeypatch.setenv("AGENTRT_LOG_FORMAT", "JSON")
    monkeypatch.setenv("AGENTRT_LOG_LEVEL", "debug")
    monkeypatch.setenv("AGENTRT_LOG_CONTENT", "1")
    asked = logging_from_env()
    assert (asked.level, asked.format, asked.content) == ("debug", "json", True)
    monkeypatch.setenv("AGENTRT_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="AGENTRT_LOG_LEVEL or AGENTRT_LOG_FORMAT: log format 'yaml'"):
        logging_from_env()


@pytest.mark.parametrize("config", [RunsConfig, ToolsConfig, SessionsConfig, TasksConfig, GatewayConfig])
def test_every_service_reads_its_metrics_port(monkeypatch, config):
    name = {
        RunsConfig: "RUNS",
        ToolsConfig: "TOOLS",
        SessionsConfig: "SESSIONS",
        TasksConfig: "TASKS",
        GatewayConfig: "GATEWAY",
    }[config]
    monkeypatch.delenv(f"AGENTRT_{name}_METRICS_PORT", raising=False)
    assert config.from_env().server.metrics_port == 0
    monkeypatch.setenv(f"AGENTRT_{name}_METRICS_PORT", "9464")
    assert config.from_env().server.metrics_port == 9464


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("-1", "AGENTRT_SESSIONS_METRICS_PORT=-1: a port must be 0..65535"),
        ("70000", "AGENTRT_SESSIONS_METRICS_PORT=70000: a port must be 0..65535"),
        ("http", "AGENTRT_SESSIONS_METRICS_PORT='http' is not an integer"),
    ],
)
def test_a_bad_metrics_port_is_refused_by_name(monkeypatch, value, words):
    monkeypatch.setenv("AGENTRT_SESSIONS_METRICS_PORT", value)
    with pytest.raises(ValueError, match=words):
        metrics_port_from_env("sessions")
    with pytest.raises(ValueError, match=words):
        edge_from_env("sessions")
    assert "metrics_port" not in edge_from_env()  # only a named service reads one
