"""Per-RPC cost of the telemetry interceptors: tracing off (the default) and on.

Figures are written to a JSON file, never asserted (`make bench`). One process, one event
loop: a grpc.aio server built as MeshServer builds it (the telemetry interceptor, then the
MeshInterceptor) and a client channel from `open_channel`, so every figure is client plus
server work of one call. Modes, each against a server and channel of its own:

- baseline: the MeshInterceptor alone, a channel without interceptors (the mesh before
  observability);
- default: what ships with no OTEL_* configuration: the RPC metrics, tracing off (no span,
  no client interceptor);
- not_sampled: tracing configured with a sampler that samples nothing (spans are non-recording;
  the trace context still travels);
- traced_dropped: every call traced (two spans, the traceparent sent and read), the batch
  processor's exporter dropping the spans: the cost of recording;
- traced_otlp: every call traced and exported over OTLP/gRPC to a collector in this process
  (tests/emulators/otlp.py; the exporter's thread shares the GIL with the calls).

Per mode and call kind (Unary; ServerStream of 10 messages read to the end), calls are made
one after another, in rounds interleaved across modes (so drift of the machine hits every mode
alike); reported per call, in microseconds, as the median over rounds: the process's CPU time
(`cpu_us`: client, server and the exporter thread together; the steadiest figure on a shared
machine, since other processes' load does not count in it) and the wall time's mean, p50 and
p99; `best_cpu_us`, the lowest CPU time of any round (the round least disturbed by the rest
of the machine); and each mode's overhead over baseline (CPU, best CPU, mean, p50).

Usage: python tests/bench/bench_rpc_telemetry.py [OUT.json] [--calls N] [--rounds R]
(default bench-results/rpc_telemetry.json, 1000 calls, 7 rounds).
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
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import wrappers_pb2 as w
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from prometheus_client import CollectorRegistry

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentrt.client.channels import open_channel  # noqa: E402
from agentrt.mesh.interceptors import MeshInterceptor  # noqa: E402
from agentrt.mesh.telemetry import use_tracer_provider  # noqa: E402
from agentrt.mesh.telemetry.metrics import RpcMetrics  # noqa: E402
from agentrt.mesh.telemetry.rpc import TelemetryServerInterceptor  # noqa: E402
from tests.emulators.otlp import OtlpCollector  # noqa: E402

SERVICE = "bench.v1.EchoService"
MODES = ("baseline", "default", "not_sampled", "traced_dropped", "traced_otlp")
_ser = w.StringValue.SerializeToString
_de = w.StringValue.FromString


class _Drop(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def _unary(request: w.StringValue, context: Any) -> w.StringValue:
    return request


async def _stream(request: w.StringValue, context: Any):  # type: ignore[no-untyped-def]
    for _ in range(10):
        yield request


def _handlers() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_unary, _de, _ser),
            "ServerStream": grpc.unary_stream_rpc_method_handler(_stream, _de, _ser),
        },
    )


def _provider(mode: str, collector: OtlpCollector) -> TracerProvider | None:
    if mode in ("baseline", "default"):
        return None
    if mode == "not_sampled":
        return TracerProvider(sampler=ALWAYS_OFF)
    provider = TracerProvider()
    if mode == "traced_dropped":
        provider.add_span_processor(BatchSpanProcessor(_Drop()))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=collector.grpc_endpoint)))
    return provider


class _Mode:
    """A server and a channel set up as `mode` wants them."""

    def __init__(self, mode: str, collector: OtlpCollector) -> None:
        self.mode = mode
        self.provider = _provider(mode, collector)

    async def start(self) -> None:
        interceptors: list[grpc.aio.ServerInterceptor] = [MeshInterceptor()]
        if self.mode != "baseline":
            interceptors.insert(0, TelemetryServerInterceptor(RpcMetrics(CollectorRegistry())))
        self.server = grpc.aio.server(interceptors=interceptors)
        self.server.add_generic_rpc_handlers([_handlers()])
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        use_tracer_provider(self.provider)  # the channel installs tracing only when it is on
        self.channel = open_channel(f"127.0.0.1:{port}")
        use_tracer_provider(None)
        self.unary = self.channel.unary_unary(f"/{SERVICE}/Unary", _ser, _de)
        self.stream = self.channel.unary_stream(f"/{SERVICE}/ServerStream", _ser, _de)

    async def measure(self, kind: str, calls: int) -> tuple[list[float], float]:
        """Return each call's wall time and the process's CPU time per call, in microseconds."""
        use_tracer_provider(self.provider)
        request = w.StringValue(value="x" * 64)
        out: list[float] = []
        cpu_started = time.process_time_ns()
        try:
            for _ in range(calls):
                started = time.perf_counter_ns()
                if kind == "Unary":
                    await self.unary(request)
                else:
                    async for _ in self.stream(request):
                        pass
                out.append((time.perf_counter_ns() - started) / 1000)
        finally:
            use_tracer_provider(None)
        return out, (time.process_time_ns() - cpu_started) / 1000 / calls

    async def stop(self) -> None:
        await self.channel.close()
        await self.server.stop(0)
        if self.provider is not None:
            self.provider.shutdown()


def _figures(measured: tuple[list[float], float]) -> dict[str, float]:
    samples, cpu = measured
    ordered = sorted(samples)
    return {
        "cpu_us": cpu,
        "mean_us": statistics.fmean(ordered),
        "p50_us": ordered[len(ordered) // 2],
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    }


async def run(calls: int, rounds: int) -> dict[str, Any]:
    """Measure every mode and kind; return the figures."""
    with OtlpCollector() as collector:
        modes = {name: _Mode(name, collector) for name in MODES}
        for mode in modes.values():
            await mode.start()
        results: dict[str, dict[str, list[dict[str, float]]]] = {
            m: {"Unary": [], "ServerStream": []} for m in MODES
        }
        try:
            for kind, count in (("Unary", calls), ("ServerStream", max(1, calls // 4))):
                for mode in modes.values():  # warm up channels, caches and label children
                    await mode.measure(kind, 200)
                for _ in range(rounds):
                    for name, mode in modes.items():
                        results[name][kind].append(_figures(await mode.measure(kind, count)))
        finally:
            for mode in modes.values():
                await mode.stop()
        exported = len(collector.spans)
    report: dict[str, Any] = {}
    for name in MODES:
        report[name] = {}
        for kind, per_round in results[name].items():
            report[name][kind] = {
                key: round(statistics.median(r[key] for r in per_round), 1)
                for key in ("cpu_us", "mean_us", "p50_us", "p99_us")
            }
            report[name][kind]["best_cpu_us"] = round(min(r["cpu_us"] for r in per_round), 1)
    for name in MODES[1:]:
        for kind in ("Unary", "ServerStream"):
            base, this = report["baseline"][kind], report[name][kind]
            this["overhead_cpu_us"] = round(this["cpu_us"] - base["cpu_us"], 1)
            this["overhead_best_cpu_us"] = round(this["best_cpu_us"] - base["best_cpu_us"], 1)
            this["overhead_mean_us"] = round(this["mean_us"] - base["mean_us"], 1)
            this["overhead_p50_us"] = round(this["p50_us"] - base["p50_us"], 1)
    report["spans_exported_over_otlp"] = exported
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="bench-results/rpc_telemetry.json")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    figures = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "grpcio": grpc.__version__},
        "calls_per_round": {"Unary": args.calls, "ServerStream": max(1, args.calls // 4)},
        "rounds": args.rounds,
        "modes": asyncio.run(run(args.calls, args.rounds)),
    }
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures["modes"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
