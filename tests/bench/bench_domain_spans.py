"""Per-turn cost of the domain telemetry (spans and series) the services record, off and on.

Figures are written to a JSON file, never asserted (`make bench`). What one tool turn of a
run records besides its RPCs, in one process with no I/O, so only the telemetry is timed:
the runs side (a turn span, a generation span with its response recorded, a tool call span
with its result, the turns counter and the queue-wait histogram), the gateway's provider
call span with its response, the tools service's tool call and sandbox command spans with
their series, and a session append counted. A run span wraps every `TURNS` turns.

Modes:
- off: what ships with no OTEL_* configuration (no tracer: the handles are no-ops; the
  Prometheus series are recorded);
- traced_dropped: a TracerProvider whose batch processor drops every span (the cost of
  making and recording the spans, not of exporting them);
- traced_content: as traced_dropped with conversation content opted in (prompts, outputs,
  tool arguments and results serialized onto the spans).

Reported per turn, in microseconds, as the median over rounds of the process's CPU time
(`cpu_us`) and wall time (`wall_us`), interleaved across modes.

Usage: python tests/bench/bench_domain_spans.py [OUT.json] [--turns N] [--rounds R]
(default bench-results/domain_spans.json, 2000 turns, 7 rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import statistics
import sys
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agentrt.mesh import telemetry
from agentrt.mesh.telemetry.metrics import RunMetrics, SessionMetrics, ToolMetrics
from agentrt.runs.observe import record_generation, record_request, record_tool_result
from agentrt.tools.calls.results import Outcome
from agentrt.tools.execution.observe import ToolObserver
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb

TURNS_PER_RUN = 5


class _Drop(SpanExporter):
    def export(self, spans):  # type: ignore[no-untyped-def]
        return SpanExportResult.SUCCESS


def _fixtures() -> tuple[gpb.ModelRequest, gpb.GenerateResponse, cpb.ToolResult]:
    text = "Write the report to out.txt, then say done. " * 20
    request = gpb.ModelRequest(
        system="You are a careful agent.",
        messages=[cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])],
    )
    final = gpb.GenerateResponse(
        response=cpb.ModelResponse(
            response_id="resp_123",
            model=cpb.ModelRef(provider="openai", model="gpt-test"),
            content=[cpb.ContentBlock(text=cpb.TextBlock(text="Writing it."))],
            usage=cpb.Usage(input_tokens=1200, output_tokens=40),
        )
    )
    result = cpb.ToolResult(call_id="call_1", name="exec_command", content="ok\n" * 50)
    return request, final, result


async def _turns(n: int) -> None:
    runs, tools, sessions = RunMetrics(), ToolObserver(ToolMetrics()), SessionMetrics()
    request, final, result = _fixtures()
    outcome = Outcome(content="ok\n" * 50, details={"exit_code": 0, "output_bytes": 150})

    async def command() -> Outcome:
        return outcome

    done = 0
    while done < n:
        with telemetry.run_span("run_bench", agent="bench", session_id="ses_bench", tenant="default"):
            for turn in range(1, TURNS_PER_RUN + 1):
                with telemetry.turn_span(turn):
                    runs.turns.inc()
                    with telemetry.generation_span(provider="openai", model="gpt-test") as gen:
                        record_request(gen, request)
                        with telemetry.provider_call_span(
                            provider="openai", model="gpt-test", rpc="StreamGenerate"
                        ) as call:
                            call.set_response(response_id="resp_123", input_tokens=1200, output_tokens=40)
                        record_generation(gen, final)
                    with telemetry.tool_call_span("exec_command", "call_1") as span:
                        span.set_content("gen_ai.tool.call.arguments", '{"cmd": "make report"}')
                        runs.tool_queue_wait.observe(0.0)
                        async with tools.tool_call(
                            "run_bench", "exec_command", "call_1", '{"cmd": "make report"}'
                        ) as rec:
                            got = await tools.sandbox_command(
                                backend="bwrap", call_id="call_1", cmd="make report", run=command
                            )
                            rec.done(got, False)
                        record_tool_result(span, result)
                    sessions.appends.labels("ok").inc()
                    sessions.entries_appended.inc(3)
                done += 1


def _measure(n: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(_turns(n))
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default="bench-results/domain_spans.json")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    providers = {}
    for mode, content in (("traced_dropped", False), ("traced_content", True)):
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=8192))
        providers[mode] = (provider, content)
    figures: dict[str, dict[str, list[float]]] = {m: {"cpu": [], "wall": []} for m in ("off", *providers)}
    _measure(200)  # warm-up
    for _ in range(args.rounds):
        for mode in figures:
            if mode == "off":
                telemetry.use_tracer_provider(None)
            else:
                provider, content = providers[mode]
                telemetry.use_tracer_provider(provider, record_content=content)
            cpu, wall = _measure(args.turns)
            figures[mode]["cpu"].append(cpu)
            figures[mode]["wall"].append(wall)
    telemetry.use_tracer_provider(None)
    for provider, _ in providers.values():
        provider.shutdown()
    out = {
        "bench": "domain_spans",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "turns_per_round": args.turns,
        "rounds": args.rounds,
        "per_turn_us": {
            mode: {
                "cpu_us": round(statistics.median(f["cpu"]), 1),
                "wall_us": round(statistics.median(f["wall"]), 1),
            }
            for mode, f in figures.items()
        },
    }
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["per_turn_us"], indent=2))


if __name__ == "__main__":
    main()
