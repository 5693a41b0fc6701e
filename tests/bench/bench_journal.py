"""Model-call journal cost: a keyed Generate against an unkeyed one, per journal backend.

Figures are written to a JSON file, never asserted (`make bench`). One gateway per backend
(the production `build_server`, in this process, on 127.0.0.1:0) with provider "openai"
pointed at the wire emulator (in this process too); one caller issues `requests` Generate
calls back to back, first unkeyed, then each with a fresh key (a first ask: claim, provider
call, record), then each key again (a replay: no provider call). Per backend and kind:
latency p50 and p99 in milliseconds. Backends: memory, SQLite (a file under a temporary
directory), PostgreSQL (the tests' database, when it answers). `journal_cost_ms_p50` is
keyed minus unkeyed at p50: what the journal adds to a turn's model call.

Usage: python tests/bench/bench_journal.py [OUT.json] [--requests N]
(default bench-results/journal.json, 200 requests).
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
import tempfile
import time
import uuid

import grpc

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "service" / "gateway"))

from gateway_helpers import emulator_config, model_request, user  # noqa: E402

from agentrt.gateway.server import build_server  # noqa: E402
from agentrt.v1 import gateway_service_pb2 as pb  # noqa: E402
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.emulators.providers import ProviderEmulator, Reply  # noqa: E402
from tests.stores import PG_URL, pg_reachable  # noqa: E402


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


async def _timed(stub: pb_grpc.ModelGatewayServiceStub, requests: list[pb.ModelRequest]) -> list[float]:
    out = []
    for request in requests:
        started = time.perf_counter()
        await stub.Generate(pb.GenerateRequest(request=request))
        out.append(time.perf_counter() - started)
    return out


async def _backend(emu: ProviderEmulator, url: str, n: int) -> dict[str, object]:
    server = build_server(emulator_config(emu, journal_url=url))
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ModelGatewayServiceStub(channel)
            base = model_request("openai", user("write out.txt"))
            unkeyed = await _timed(stub, [base] * n)
            keyed = []
            for _ in range(n):
                request = pb.ModelRequest()
                request.CopyFrom(base)
                request.idempotency_key = f"bench-{uuid.uuid4().hex}/turn-1/ctx-1-e"
                keyed.append(request)
            first = await _timed(stub, keyed)
            replay = await _timed(stub, keyed)
    finally:
        await server.stop(grace=0)
    result: dict[str, object] = {
        "unkeyed": _figures(unkeyed),
        "keyed_first_ask": _figures(first),
        "keyed_replay": _figures(replay),
    }
    result["journal_cost_ms_p50"] = round(
        _figures(first)["p50_ms"] - _figures(unkeyed)["p50_ms"],
        3,  # type: ignore[index]
    )
    return result


async def main(out: pathlib.Path, n: int) -> None:
    results: dict[str, object] = {}
    with ProviderEmulator() as emu, tempfile.TemporaryDirectory() as tmp:
        emu.responder = lambda path, body: Reply(text="a scripted answer", input_tokens=40, output_tokens=5)
        backends = {"memory": "memory", "sqlite": f"sqlite+aiosqlite:///{tmp}/gateway.db"}
        if await pg_reachable():
            backends["postgres"] = PG_URL
        for name, url in backends.items():
            results[name] = await _backend(emu, url, n)
    report = {
        "requests_per_kind": n,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "backends": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="bench-results/journal.json")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(pathlib.Path(args.out), args.requests))
