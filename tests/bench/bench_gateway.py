"""Gateway overhead benchmark: gRPC through the gateway vs the OpenAI SDK called directly.

Figures are written to a JSON file, never asserted (`make bench`). Shapes:
- the wire emulator runs as its own process (`python -m tests.emulators.providers`), so its
  HTTP server shares no GIL with either side;
- the gateway runs as its own process (`python -m agentrt.cli.main serve gateway`, gated on
  grpc.health SERVING), provider "openai" (Responses API) pointed at the emulator, the
  limiter's budget set far above the load so admission never waits (queue waits are
  reported to show it);
- this process is the caller: `concurrency` asyncio tasks issuing requests back to back,
  either with the official `openai` SDK straight at the emulator ("direct") or over one
  grpc.aio channel to the gateway ("gateway"). Both send the same conversation (system
  text, one user message, two tools) and get the same scripted answer (a text reply with
  usage).

For each concurrency (1, 16, 64) and each of Generate / StreamGenerate (direct: the SDK's
non-streaming call / a streamed call read to its end), the figures are per-request latency
p50 and p99 in milliseconds and throughput in requests per second for three callers:
- direct_sdk: the SDK as an application calls it (typed response models);
- direct_sdk_raw: the SDK call the adapter itself makes (`with_raw_response`, transcript and
  tools as `extra_body`, the body or the SSE events as plain JSON): the floor a request
  through the gateway cannot go under;
- gateway: Generate / StreamGenerate over gRPC.
overhead_ms_p50/p99 = gateway minus direct_sdk, overhead_vs_raw_ms_p50/p99 = gateway minus
direct_sdk_raw, at the same percentile. A negative overhead means the caller's own SDK work
(typed parsing in the caller's process) costs more than the hop through the gateway. On a
machine with few cores the three processes compete for CPU; `machine.cpus` says how many.

Usage: python tests/bench/bench_gateway.py [OUT.json] [--requests-per-caller N]
(default bench-results/gateway.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import openai

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentrt.v1 import common_pb2 as c  # noqa: E402
from agentrt.v1 import gateway_service_pb2 as pb  # noqa: E402
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc  # noqa: E402

CONCURRENCY = (1, 16, 64)
MODEL = "gpt-bench"
SYSTEM = "You are a coding agent. Use the tools to inspect and change files in the workspace."
USER = "List the files in the workspace, then write a summary of README.md to notes.txt."
SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
ANSWER = {"text": "The workspace holds README.md and src/; the summary is written.", "chunk_chars": 16}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class Emulator:
    """The wire emulator as a process, scripted over HTTP."""

    def __init__(self, logs: pathlib.Path) -> None:
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._log = open(logs / "emulator.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.emulators.providers", "--port", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("provider emulator listening"):
            raise RuntimeError(f"emulator did not start: {line!r}")

    def script(self, n: int) -> None:
        data = json.dumps([ANSWER] * n).encode()
        urllib.request.urlopen(urllib.request.Request(self.base_url + "/_emulator/script", data=data)).read()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._log.close()


class Gateway:
    """The gateway as a process (`agentrt serve gateway`), gated on health SERVING."""

    def __init__(self, emulator: Emulator, logs: pathlib.Path) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._log = open(logs / "gateway.log", "w")  # noqa: SIM115 - closed in stop()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "services"), str(ROOT), os.environ.get("PYTHONPATH", "")]
            ),
            "AGENTRT_OPENAI_BASE_URL": emulator.base_url + "/v1",
            "AGENTRT_OPENAI_API_KEY": "bench",
            "AGENTRT_OPENAI_MODEL": MODEL,
            "AGENTRT_DEFAULT_MODEL": f"openai:{MODEL}",
            "AGENTRT_LOCAL_MODEL_PATH": "/nonexistent.gguf",
            # Far above the load: the figures are the gateway's own cost, not admission waits.
            "AGENTRT_GATEWAY_TOKENS_PER_MINUTE": str(10**12),
            "AGENTRT_LIMITER_TOKENS_PER_MINUTE": str(10**12),
            "AGENTRT_STATE_DIR": str(logs),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt.cli.main", "serve", "gateway", "--port", str(self.port)],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    async def wait_serving(self, timeout: float = 60.0) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway exited with {self.proc.returncode}; see gateway.log")
                try:
                    answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("gateway not SERVING in time")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._log.close()


def model_request() -> pb.ModelRequest:
    request = pb.ModelRequest(
        model=c.ModelRef(provider="openai", model=MODEL),
        system=SYSTEM,
        messages=[c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text=USER))])],
    )
    request.tools.add(
        name="exec_command", description="Run a command.", parameters_json_schema=json.dumps(SCHEMA)
    )
    request.tools.add(name="read_file", description="Read a file.", parameters_json_schema=json.dumps(SCHEMA))
    return request


def sdk_kwargs() -> dict[str, Any]:
    tools = [
        {"type": "function", "name": n, "description": d, "parameters": SCHEMA, "strict": False}
        for n, d in (("exec_command", "Run a command."), ("read_file", "Read a file."))
    ]
    return {
        "model": MODEL,
        "instructions": SYSTEM,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": USER}]}],
        "tools": tools,
        "store": False,
    }


async def run_level(
    call: Callable[[], Awaitable[float]], concurrency: int, per_caller: int
) -> dict[str, Any]:
    """Run `concurrency` callers of `per_caller` calls each (after one warm-up call each)."""
    await asyncio.gather(*(call() for _ in range(concurrency)))
    samples: list[float] = []

    async def caller() -> None:
        for _ in range(per_caller):
            samples.append(await call())

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {
        "requests": len(samples),
        "p50_ms": _pct(samples, 0.50),
        "p99_ms": _pct(samples, 0.99),
        "mean_ms": round(sum(samples) / len(samples), 3),
        "throughput_rps": round(len(samples) / elapsed, 1),
    }


async def bench(out: pathlib.Path, per_caller: dict[int, int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        logs = pathlib.Path(tmp)
        emulator = Emulator(logs)
        gateway = Gateway(emulator, logs)
        try:
            await gateway.wait_serving()
            client = openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="bench", max_retries=0)
            channel = grpc.aio.insecure_channel(gateway.address)
            stub = pb_grpc.ModelGatewayServiceStub(channel)
            generate = pb.GenerateRequest(request=model_request())
            stream = pb.StreamGenerateRequest(request=model_request())
            kwargs = sdk_kwargs()
            # What the adapter sends: the transcript and tools as extra_body (provider.sdk_kwargs).
            raw_kwargs = {k: v for k, v in kwargs.items() if k not in ("input", "tools")}
            raw_kwargs["extra_body"] = {"input": kwargs["input"], "tools": kwargs["tools"]}
            waits: list[float] = []

            async def direct_generate() -> float:
                t = time.perf_counter()
                await client.responses.create(**kwargs)
                return (time.perf_counter() - t) * 1000

            async def raw_generate() -> float:
                t = time.perf_counter()
                raw = await client.responses.with_raw_response.create(**raw_kwargs)
                json.loads(raw.text)
                return (time.perf_counter() - t) * 1000

            async def raw_stream() -> float:
                t = time.perf_counter()
                raw = await client.responses.with_raw_response.create(**raw_kwargs, stream=True)
                async with raw.parse(to=openai.AsyncStream[object]) as events:
                    async for _ in events:
                        pass
                return (time.perf_counter() - t) * 1000

            async def direct_stream() -> float:
                t = time.perf_counter()
                events = await client.responses.create(**kwargs, stream=True)
                async for _ in events:
                    pass
                return (time.perf_counter() - t) * 1000

            async def gateway_generate() -> float:
                t = time.perf_counter()
                answer = await stub.Generate(generate)
                waits.append(answer.queue_wait.ToNanoseconds() / 1e6)
                return (time.perf_counter() - t) * 1000

            async def gateway_stream() -> float:
                t = time.perf_counter()
                async for item in stub.StreamGenerate(stream):
                    if item.WhichOneof("event") == "final":
                        waits.append(item.final.queue_wait.ToNanoseconds() / 1e6)
                return (time.perf_counter() - t) * 1000

            levels: dict[str, Any] = {}
            for concurrency in CONCURRENCY:
                n = per_caller[concurrency]
                row: dict[str, Any] = {}
                for rpc, direct, raw_direct, through in (
                    ("Generate", direct_generate, raw_generate, gateway_generate),
                    ("StreamGenerate", direct_stream, raw_stream, gateway_stream),
                ):
                    emulator.script(3 * (concurrency * (n + 1)))
                    d = await run_level(direct, concurrency, n)
                    r = await run_level(raw_direct, concurrency, n)
                    g = await run_level(through, concurrency, n)
                    row[rpc] = {
                        "direct_sdk": d,
                        "direct_sdk_raw": r,
                        "gateway": g,
                        "overhead_ms_p50": round(g["p50_ms"] - d["p50_ms"], 3),
                        "overhead_ms_p99": round(g["p99_ms"] - d["p99_ms"], 3),
                        "overhead_vs_raw_ms_p50": round(g["p50_ms"] - r["p50_ms"], 3),
                        "overhead_vs_raw_ms_p99": round(g["p99_ms"] - r["p99_ms"], 3),
                    }
                    print(
                        f"c={concurrency:<3} {rpc:<15} sdk p50 {d['p50_ms']:.2f} p99 {d['p99_ms']:.2f} | "
                        f"raw p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} | "
                        f"gateway p50 {g['p50_ms']:.2f} p99 {g['p99_ms']:.2f} ({g['throughput_rps']} rps)",
                        flush=True,
                    )
                levels[str(concurrency)] = row
            await channel.close()
            await client.close()
        finally:
            gateway.stop()
            emulator.stop()
    return {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "shape": "emulator, gateway and caller each in their own process; provider openai (Responses API)",
        "limiter_queue_wait_ms_max": round(max(waits), 3) if waits else None,
        "concurrency": levels,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="bench-results/gateway.json")
    parser.add_argument("--requests-per-caller", type=int, default=0, help="0: 300, 40, 12 for 1, 16, 64")
    args = parser.parse_args(argv)
    n = args.requests_per_caller
    per_caller = {1: n or 300, 16: n or 40, 64: n or 12}
    out = pathlib.Path(args.out)
    figures = asyncio.run(bench(out, per_caller))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
