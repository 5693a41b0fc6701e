"""The tool service's spans (one per tool call, one per sandbox command) and its series on /metrics.

The production server (`build_server`) with a metrics port; real commands in the configured
sandbox; spans go to the SDK's in-memory exporter (tests/tracing.py); /metrics is scraped
over HTTP.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import replace

import grpc
import pytest
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families
from tools_helpers import ToolsEnv, make_config

from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc
from tests.ports import free_port
from tests.tracing import recorded


def _scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
async def served(start_server, tmp_path):
    config = make_config(tmp_path)
    port = free_port()
    config = replace(config, server=replace(config.server, metrics_port=port))
    address = await start_server(build_server(config))
    async with grpc.aio.insecure_channel(address) as channel:
        yield ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws"), port


async def test_a_tool_call_and_its_command_are_spans_under_the_rpc_and_counted(served):
    tools, port = served
    backend = tools.config.sandbox
    with recorded() as rec:
        first = await tools.run("exec_command", {"cmd": "echo secret-words"}, call_id="call_ok")
        again = await tools.run("exec_command", {"cmd": "echo secret-words"}, call_id="call_ok")
        failed = await tools.run("exec_command", {"cmd": "exit 3"}, call_id="call_bad")
        timed = await tools.run("exec_command", {"cmd": "sleep 30", "timeout_ms": 200}, call_id="call_slow")
        wrote = await tools.run("write_file", {"path": "a.txt", "content": "x"}, call_id="call_write")
    assert first.result.status == common_pb2.TOOL_RESULT_STATUS_OK and again.replayed
    assert failed.result.is_error and timed.result.status == common_pb2.TOOL_RESULT_STATUS_TIMED_OUT
    assert not wrote.result.is_error
    spans = rec.spans
    by_id = {s.context.span_id: s for s in spans}
    calls = [s for s in spans if s.name.startswith("execute_tool ")]
    commands = [s for s in spans if s.name == "sandbox command"]
    assert sorted(dict(s.attributes or {})["gen_ai.tool.call.id"] for s in calls) == [
        "call_bad", "call_ok", "call_ok", "call_slow", "call_write",
    ]  # fmt: skip
    for call in calls:
        server = by_id[call.parent.span_id]  # type: ignore[union-attr]
        assert server.kind == SpanKind.SERVER and server.name == "agentrt.v1.ToolService/ExecuteTool"
        assert dict(call.attributes or {})["agentrt.run.id"] == "run_1"
    replayed = [
        dict(s.attributes or {})["agentrt.tool.replayed"] for s in calls if "call_ok" in str(s.attributes)
    ]
    assert sorted(replayed) == [False, True]
    # three commands ran (the replay ran nothing), each the child of its call's span
    assert len(commands) == 3
    exits = {}
    for command in commands:
        parent = by_id[command.parent.span_id]  # type: ignore[union-attr]
        attrs = dict(command.attributes or {})
        assert parent.name == "execute_tool exec_command"
        assert attrs["gen_ai.tool.call.id"] == dict(parent.attributes or {})["gen_ai.tool.call.id"]
        assert attrs["agentrt.sandbox.backend"] == backend
        exits[attrs["gen_ai.tool.call.id"]] = (
            attrs.get("process.exit.code"),
            attrs["agentrt.sandbox.outcome"],
        )
    assert exits["call_ok"] == (0, "exit_zero") and exits["call_bad"] == (3, "exit_nonzero")
    assert exits["call_slow"][1] == "timeout"
    # content is off by default: neither the command nor its output is on any span
    for span in spans:
        assert "secret-words" not in str(dict(span.attributes or {}))

    samples = await asyncio.to_thread(_scrape, port)

    def value(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    assert value("agentrt_tools_calls_total", tool="exec_command", outcome="ok") == 1
    assert value("agentrt_tools_calls_total", tool="exec_command", outcome="replayed") == 1
    assert value("agentrt_tools_calls_total", tool="exec_command", outcome="error") == 2
    assert value("agentrt_tools_calls_total", tool="write_file", outcome="ok") == 1
    for outcome in ("exit_zero", "exit_nonzero", "timeout"):
        assert value("agentrt_tools_sandbox_commands_total", backend=backend, outcome=outcome) == 1, outcome
    assert value("agentrt_tools_sandbox_command_duration_seconds_count", backend=backend) == 3
    assert value("agentrt_tools_sandbox_commands_running", backend=backend) == 0
    assert (
        value(
            "agentrt_rpc_server_requests_total",
            service="agentrt.v1.ToolService",
            method="ExecuteTool",
            code="OK",
        )
        == 5
    )


async def test_with_the_content_opt_in_the_command_and_its_result_are_on_the_spans(served):
    tools, _ = served
    with recorded(content=True) as rec:
        await tools.run("exec_command", {"cmd": "echo secret-words"}, call_id="call_c")
    command = rec.named("sandbox command")
    assert dict(command.attributes or {})["agentrt.sandbox.command"] == "echo secret-words"
    call = rec.named("execute_tool exec_command")
    attrs = dict(call.attributes or {})
    assert "secret-words" in attrs["gen_ai.tool.call.arguments"]
    assert "secret-words" in attrs["gen_ai.tool.call.result"]


async def test_a_policy_refusal_counts_as_refused_and_runs_nothing(served):
    tools, port = served
    request = tools.request("exec_command", {"cmd": "rm -rf /"}, call_id="call_pol")
    request.command_policy.deny.append("rm")
    answer = await tools.stub.ExecuteTool(request)
    assert answer.result.is_error
    samples = await asyncio.to_thread(_scrape, port)
    refused = [
        v
        for (n, labels), v in samples.items()
        if n == "agentrt_tools_sandbox_commands_total" and ("outcome", "refused") in labels
    ]
    assert sum(refused) == 1
