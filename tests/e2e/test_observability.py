"""Acceptance of issue 14's observability: one run over the five processes started by
`start_mesh`, traced through OTLP/gRPC into an in-test collector, is one trace across runs,
gateway, tools and sessions, every server span the child of the calling process's client span
and the domain spans (run, turn, generation, provider call with its retry event, tool call,
sandbox command) in their parent-child shape, without conversation content; every service's
/metrics answers with the RPC series and its named domain series; JSON log lines carry the
run id, turn and trace id.

One mesh for the module: the services export to the collector (OTEL_* variables), log JSON
(AGENTRT_LOG_FORMAT), and get free metrics ports from `start_mesh`. The test process traces
too, so the run's trace starts at the test's own span.
"""

from __future__ import annotations

import asyncio
import io
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import NO_LOCAL_MODEL, STATE_TIMEOUT, free_port_map
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from agentrt.cli.run import build_agent, follow_run, terminal_approver
from agentrt.cli.serve import SERVICES
from agentrt.cli.up import Mesh, start_mesh
from agentrt.client.channels import MeshClient
from agentrt.mesh.telemetry import TracingConfig, configure_tracing, shutdown_tracing, tracing
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.otlp import OtlpCollector, ReceivedSpan
from tests.emulators.providers import ErrorReply, ProviderEmulator, Reply, ToolCallReply

pytestmark = pytest.mark.slow

COMMAND_ARGS = '{"cmd": "echo traced > traced.txt"}'
#: The services whose server spans one run must reach, and the RPC each serves for it.
HOPS = {
    "agentrt-gateway": ("agentrt.v1.ModelGatewayService/StreamGenerate",),
    "agentrt-tools": ("agentrt.v1.ToolService/ExecuteTool", "agentrt.v1.ToolService/StreamExecuteTool"),
    "agentrt-sessions": ("agentrt.v1.SessionService/AppendEntries", "agentrt.v1.SessionService/GetContext"),
}


class Traced:
    def __init__(self, mesh: Mesh, emu: ProviderEmulator, collector: OtlpCollector, root: Path) -> None:
        self.mesh, self.emu, self.collector, self.root = mesh, emu, collector, root


@pytest.fixture(scope="module")
def traced_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    root = tmp_path_factory.mktemp("traced")
    with OtlpCollector() as collector, ProviderEmulator() as emu:
        env = {
            "AGENTRT_OPENAI_BASE_URL": emu.base_url + "/v1",
            "AGENTRT_OPENAI_API_KEY": "test-key",
            "AGENTRT_GATEWAY_MAX_RETRIES": "1",  # one scripted 429 is retried: a diagnostic in the log
            "AGENTRT_LOCAL_MODEL_PATH": NO_LOCAL_MODEL,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.grpc_endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: spans reach the collector while the test waits
            "AGENTRT_LOG_FORMAT": "json",
        }
        mesh = start_mesh(root / "state", ports=free_port_map(), env=env)
        try:
            yield Traced(mesh, emu, collector, root)
        finally:
            mesh.stop()


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _requests(samples, service: str, method: str) -> float:
    return sum(
        v
        for (name, labels), v in samples.items()
        if name == "agentrt_rpc_server_requests_total"
        and ("service", service) in labels
        and ("method", method) in labels
        and ("code", "OK") in labels
    )


def _of_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def _reached_every_hop(spans: list[ReceivedSpan], trace_id: str) -> bool:
    mine = _of_trace(spans, trace_id)
    servers = {(s.service, s.name) for s in mine if s.kind == "SERVER"}
    models = [s for s in mine if s.kind == "SERVER" and s.service == "agentrt-gateway"]
    # a client span ends after its server span, so it may reach the collector later: wait for it
    ids = {s.span_id for s in mine}
    parents_arrived = all(s.parent_span_id in ids for s in mine if s.kind == "SERVER")
    seen = {(s.service, s.name) for s in mine}
    return (
        ("agentrt-runs", "agentrt.v1.RunService/StartRun") in servers
        and all(any((svc, name) in servers for name in names) for svc, names in HOPS.items())
        and len(models) >= 2
        and parents_arrived
        and any(svc == "agentrt-runs" and name.startswith("invoke_agent ") for svc, name in seen)
        and ("agentrt-tools", "sandbox command") in seen
        and sum(1 for s in mine if s.service == "agentrt-gateway" and s.kind == "CLIENT") >= 2
    )


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[tuple[str, str, str]]:
    """(service, name, kind) of the span's ancestors, nearest first."""
    out = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        out.append((span.service, span.name, span.kind))
    return out


async def test_one_run_is_one_trace_across_the_mesh_with_metrics_and_json_logs(traced_mesh, tmp_path):
    mesh, emu, collector = traced_mesh.mesh, traced_mesh.emu, traced_mesh.collector
    emu.script(
        [
            ErrorReply(status=429, retry_after=0.05),
            Reply(text="Writing it.", tool_calls=[ToolCallReply("exec_command", COMMAND_ARGS)]),
            Reply(text="Done."),
        ]
    )
    request = pb.StartRunRequest(
        agent=build_agent(cpb.ModelRef(provider="openai", model="gpt-test"), max_turns=4),
        input="Write traced.txt, then say done.",
        workspace=str(tmp_path / "ws"),
    )
    configure_tracing(TracingConfig(exporters=("otlp",), endpoint=collector.grpc_endpoint), "e2e-client")
    client = MeshClient(runs=mesh.addresses["runs"])
    console = Console(file=io.StringIO(), width=120)
    try:
        active = tracing.tracer()
        assert active is not None
        with active.start_as_current_span("client run") as root:
            outcome = await asyncio.wait_for(
                follow_run(client, request, console, terminal_approver(console, False, False)), STATE_TIMEOUT
            )
    finally:
        await client.close()
        shutdown_tracing()
    assert outcome.run.status == cpb.RUN_STATUS_COMPLETED, outcome.run
    assert (tmp_path / "ws" / "traced.txt").read_text() == "traced\n"
    trace_id = format(root.get_span_context().trace_id, "032x")

    # --- one trace, from the test's span through runs to gateway, tools and sessions
    spans = await asyncio.to_thread(
        collector.wait_for,
        lambda got: _reached_every_hop(got, trace_id),
        "the run's spans from four services",
    )
    mine = _of_trace(spans, trace_id)
    by_id = {s.span_id: s for s in mine}
    assert {s.service for s in mine} >= {"agentrt-e2e-client", "agentrt-runs", *HOPS}
    servers = [s for s in mine if s.kind == "SERVER"]
    for server in servers:
        parent = by_id.get(server.parent_span_id)
        assert parent is not None, f"{server.service} {server.name}: its parent is not in the trace"
        assert parent.kind == "CLIENT" and parent.name == server.name
        caller = "agentrt-e2e-client" if server.service == "agentrt-runs" else "agentrt-runs"
        assert parent.service == caller, (server.service, server.name, parent.service)
        assert server.attributes["rpc.grpc.status_code"] == 0, (server.service, server.name)
    start = next(s for s in servers if s.name == "agentrt.v1.RunService/StartRun")
    assert by_id[start.parent_span_id].parent_span_id == format(root.get_span_context().span_id, "016x")
    # the run's own peer calls continue the StartRun server span's trace (the run task inherits it)
    peer_calls = [s for s in mine if s.service == "agentrt-runs" and s.kind == "CLIENT"]
    assert {s.name for s in peer_calls} >= {"agentrt.v1.ModelGatewayService/StreamGenerate"}
    assert all(s.parent_span_id for s in peer_calls)
    # no model call of this run escaped into another trace
    model_servers = [s for s in spans if s.service == "agentrt-gateway" and s.kind == "SERVER"]
    assert model_servers and all(s.trace_id == trace_id for s in model_servers)

    # --- the domain spans, in the shape of docs/architecture.md "Observability"
    run_span = next(s for s in mine if s.service == "agentrt-runs" and s.name.startswith("invoke_agent "))
    assert by_id[run_span.parent_span_id].name == "agentrt.v1.RunService/StartRun"
    assert run_span.attributes["agentrt.run.id"] == outcome.run.run_id
    assert run_span.attributes["agentrt.run.status"] == "completed"
    turns = [s for s in mine if s.service == "agentrt-runs" and s.name.startswith("turn ")]
    assert sorted(t.name for t in turns) == ["turn 1", "turn 2"]
    assert all(t.parent_span_id == run_span.span_id for t in turns)
    runs_turn = ("agentrt-runs", "turn 1", "INTERNAL")
    # a model call: provider CLIENT span (gateway) → RPC server → RPC client → generation → turn → run
    provider = [s for s in mine if s.service == "agentrt-gateway" and s.kind == "CLIENT"]
    assert len(provider) == 2 and all(p.name == "chat gpt-test" for p in provider)
    stream = "agentrt.v1.ModelGatewayService/StreamGenerate"
    for call in provider:
        up = _ancestors(call, by_id)
        assert up[:3] == [
            ("agentrt-gateway", stream, "SERVER"),
            ("agentrt-runs", stream, "CLIENT"),
            ("agentrt-runs", "chat gpt-test", "INTERNAL"),
        ], up
        assert up[3][1].startswith("turn ") and up[4][1] == run_span.name
        assert call.attributes["gen_ai.response.id"] and call.attributes["gen_ai.usage.input_tokens"] >= 0
    retried = [p for p in provider if "model_retry" in p.events]
    assert len(retried) == 1  # the scripted 429: a zero-duration event on the first call's span
    generations = [s for s in mine if s.service == "agentrt-runs" and s.name == "chat gpt-test"]
    assert {g.attributes["gen_ai.response.id"] for g in generations} == {
        p.attributes["gen_ai.response.id"] for p in provider
    }
    # the tool call: sandbox command → tools' span → RPC server → RPC client → runs' tool span → turn 1
    command = next(s for s in mine if s.name == "sandbox command")
    up = _ancestors(command, by_id)
    assert up[0] == ("agentrt-tools", "execute_tool exec_command", "INTERNAL")
    assert up[1][0] == "agentrt-tools" and up[1][2] == "SERVER" and up[1][1] in HOPS["agentrt-tools"]
    assert up[2] == ("agentrt-runs", up[1][1], "CLIENT")
    assert up[3] == ("agentrt-runs", "execute_tool exec_command", "INTERNAL") and up[4] == runs_turn
    assert command.attributes["process.exit.code"] == 0
    assert (
        command.attributes["gen_ai.tool.call.id"]
        == by_id[command.parent_span_id].attributes["gen_ai.tool.call.id"]
    )
    # conversation content is off by default (004 §2.11c): not the prompt, the answer, nor the command
    exported = " ".join(str(s.attributes) for s in mine)
    for words in ("Write traced.txt", "Writing it.", "echo traced"):
        assert words not in exported, words

    # --- every service's /metrics answers with the RPC series (the gateway's own series too)
    urls = mesh.metrics_urls
    assert list(urls) == list(SERVICES) and all(urls.values())
    scraped = {name: await asyncio.to_thread(_scrape, url) for name, url in urls.items()}
    assert _requests(scraped["runs"], "agentrt.v1.RunService", "StartRun") >= 1
    assert _requests(scraped["gateway"], "agentrt.v1.ModelGatewayService", "StreamGenerate") >= 2
    assert any(name == "agentrt_gateway_requests_total" for name, _ in scraped["gateway"])
    assert (
        _requests(scraped["tools"], "agentrt.v1.ToolService", "ExecuteTool")
        + _requests(scraped["tools"], "agentrt.v1.ToolService", "StreamExecuteTool")
        >= 1
    )
    assert _requests(scraped["sessions"], "agentrt.v1.SessionService", "AppendEntries") >= 1
    assert _requests(scraped["tasks"], "grpc.health.v1.Health", "Check") >= 1  # start_mesh's readiness checks
    for name, samples in scraped.items():
        assert any(n == "agentrt_rpc_server_duration_seconds_bucket" for n, _ in samples), name
    # the domain series, named as docs/operations.md "Metrics" lists them
    named = {svc: {n for n, _ in samples} for svc, samples in scraped.items()}
    assert named["runs"] >= {
        "agentrt_runs_running", "agentrt_runs_suspended", "agentrt_runs_pending_approvals",
        "agentrt_runs_waiting_for_replica", "agentrt_runs_started_total", "agentrt_runs_finished_total",
        "agentrt_runs_turns_total", "agentrt_runs_tool_queue_wait_seconds_count",
        "agentrt_runs_replica_wait_seconds_count",
    }  # fmt: skip
    runs_samples = scraped["runs"]
    assert runs_samples[("agentrt_runs_finished_total", frozenset({("status", "completed")}))] >= 1
    assert runs_samples[("agentrt_runs_turns_total", frozenset())] >= 2
    assert named["tools"] >= {
        "agentrt_tools_calls_total", "agentrt_tools_sandbox_commands_total",
        "agentrt_tools_sandbox_command_duration_seconds_count", "agentrt_tools_sandbox_commands_running",
    }  # fmt: skip
    assert named["sessions"] >= {
        "agentrt_sessions_appends_total",
        "agentrt_sessions_entries_appended_total",
        "agentrt_sessions_watchers",
    }
    assert scraped["sessions"][("agentrt_sessions_appends_total", frozenset({("outcome", "ok")}))] >= 1
    assert "agentrt_tasks_watchers" in named["tasks"]

    # --- JSON logs: every service's own lines are JSON naming it; the retry diagnostic carries the trace
    lines = {name: path.read_text(errors="replace").splitlines() for name, path in mesh.log_paths.items()}
    records = {
        name: [json.loads(line) for line in text if line.startswith("{")] for name, text in lines.items()
    }
    for name in SERVICES:
        assert any(r.get("service") == name and "serving" in r["message"] for r in records[name]), name
    retry = [r for r in records["gateway"] if r["message"].startswith("gateway retry")]
    assert retry and retry[0]["trace_id"] == trace_id and retry[0]["level"] == "WARNING"
    assert retry[0]["span_id"] in {p.span_id for p in provider}  # logged inside the provider call's span
    assert retry[0]["run_id"] == outcome.run.run_id
    # the runs replica's lines for the run carry its id, the turn and the trace
    noted = [r for r in records["runs"] if r.get("diagnostic") == "model_retry"]
    assert noted and noted[0]["run_id"] == outcome.run.run_id and noted[0]["turn"] == 1
    assert noted[0]["trace_id"] == trace_id
    ended = [r for r in records["runs"] if r["message"].startswith(f"run {outcome.run.run_id}: completed")]
    assert ended and ended[0]["trace_id"] == trace_id and ended[0]["run_id"] == outcome.run.run_id
