"""Benchmark (`make bench`): runs per minute at 1, 2 and 3 runs replicas, on PostgreSQL.

The scaled-out mesh of the issue 13 acceptance (tests/e2e/scale_helpers.py: three runs
replicas, two of every other service, each its own process, one DNS name per service) with
the provider emulator answering at once. For k = 1, 2, 3 the runs name resolves to the
first k replicas only, and BENCH_RUNS (64) runs of 5 turns (4 tool turns appending a line,
then an answer) are started at once through it; the figure is runs completed per minute of
wall time, from the first StartRun to the last run's completion (every run must complete),
each run followed over its event stream as a client would. Beside it, the issue 15 figure:
the mesh's CPU per turn (user + system of every service process, from /proc) at 64
concurrent runs against the same for SINGLE_RUNS runs one at a time, and the mean wall
latency of a turn in each. Written to $AGENTRT_BENCH_DIR/scale_out.json; never asserted (a
2-core machine shared by other work mostly measures its cores: see docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from scale_helpers import ZONE, Responder, ScaledMesh  # noqa: E402

from agentrt.client.channels import open_channel  # noqa: E402
from agentrt.client.events import events_of  # noqa: E402
from agentrt.v1 import common_pb2 as cpb  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402
from agentrt.v1 import run_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.emulators.providers import ProviderEmulator  # noqa: E402
from tests.stores import pg_reachable  # noqa: E402

OUT = os.environ.get("AGENTRT_BENCH_DIR", "bench-results")
BENCH_RUNS = int(os.environ.get("AGENTRT_BENCH_SCALE_RUNS", "64"))
TURNS = 5
#: Runs measured one after another for the single-run cost.
SINGLE_RUNS = 6


def _mesh_cpu_s(mesh: ScaledMesh) -> float:
    """CPU seconds (user + system, from /proc) the mesh's processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for replicas in mesh.replicas.values():
        for replica in replicas:
            if replica.proc is not None and replica.alive():
                with open(f"/proc/{replica.proc.pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def _run_to_end(stub: pb_grpc.RunServiceStub, run_id: str) -> int:
    """Follow a run's event stream to its run_completed; return its status."""
    status = cpb.RUN_STATUS_UNSPECIFIED
    request = pb.StreamRunEventsRequest(run_id=run_id, batch_events=True)
    async for message in stub.StreamRunEvents(request, timeout=600):
        for event in events_of(message):
            if event.HasField("run_completed"):
                status = event.run_completed.status
    return status


@dataclass
class Batch:
    """What one batch of runs took: wall seconds, the mesh's CPU and the wall per turn, statuses."""

    seconds: float
    cpu_ms_per_turn: float
    turn_latency_ms: float
    statuses: dict[int, int]


async def _batch(mesh: ScaledMesh, replicas: int, runs: int, tag: str) -> Batch:
    """Start `runs` runs at once through the first `replicas` runs replicas; follow each to its end."""
    mesh.zone.addresses[f"runs.{ZONE}"] = [r.host for r in mesh.runs[:replicas]]
    channel = open_channel(mesh.target("runs"))
    stub = pb_grpc.RunServiceStub(channel)
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command")],
        limits=pb.AgentLimits(max_turns=TURNS + 1),
    )

    async def one(i: int) -> tuple[int, float]:
        t0 = time.monotonic()
        started = await stub.StartRun(
            pb.StartRunRequest(
                agent=agent,
                input=f"bench scale:{tag}-{i}",
                workspace=str(mesh.root / "work" / f"{tag}-{i}"),
            ),
            timeout=60,
        )
        status = await _run_to_end(stub, started.run_id)
        return status, time.monotonic() - t0

    try:
        cpu0, began = _mesh_cpu_s(mesh), time.monotonic()
        ended = await asyncio.gather(*(one(i) for i in range(runs)))
        seconds, cpu = time.monotonic() - began, _mesh_cpu_s(mesh) - cpu0
    finally:
        await channel.close()
    statuses: dict[int, int] = {}
    for status, _ in ended:
        statuses[status] = statuses.get(status, 0) + 1
    turns = runs * TURNS
    return Batch(seconds, cpu / turns * 1000, sum(d for _, d in ended) / turns * 1000, statuses)


async def _measure(mesh: ScaledMesh, replicas: int, single_cpu_ms: float) -> dict[str, object]:
    got = await _batch(mesh, replicas, BENCH_RUNS, f"k{replicas}")
    statuses, seconds = got.statuses, got.seconds
    return {
        "runs_replicas": replicas,
        "concurrent_runs": BENCH_RUNS,
        "turns_per_run": TURNS,
        "seconds": round(seconds, 2),
        "runs_per_minute": round(BENCH_RUNS / seconds * 60, 1),
        "cpu_ms_per_turn": round(got.cpu_ms_per_turn, 2),
        # issue 15: the per-turn cost at BENCH_RUNS concurrent runs within 2x the single run's
        "cpu_per_turn_vs_single": round(got.cpu_ms_per_turn / single_cpu_ms, 2),
        "turn_latency_ms": round(got.turn_latency_ms, 1),
        "completed": statuses.get(cpb.RUN_STATUS_COMPLETED, 0),
        "not_completed": {
            cpb.RunStatus.Name(k): v for k, v in statuses.items() if k != cpb.RUN_STATUS_COMPLETED
        },
    }


async def _single(mesh: ScaledMesh) -> dict[str, float]:
    """The single-run cost: SINGLE_RUNS runs one after another, through every runs replica."""
    cpu = latency = 0.0
    for i in range(SINGLE_RUNS):
        got = await _batch(mesh, len(mesh.runs), 1, f"single{i}")
        cpu += got.cpu_ms_per_turn
        latency += got.turn_latency_ms
    return {
        "runs": float(SINGLE_RUNS),
        "cpu_ms_per_turn": round(cpu / SINGLE_RUNS, 2),
        "turn_latency_ms": round(latency / SINGLE_RUNS, 1),
    }


def test_runs_per_minute_at_1_2_3_runs_replicas(tmp_path):
    if not asyncio.run(pg_reachable()):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (benchmark not run)")
    (tmp_path / "work").mkdir()
    emu = ProviderEmulator()
    emu.responder = Responder(TURNS)
    mesh = ScaledMesh(tmp_path, emu, budget=100_000_000, counts={"runs": 3})
    try:
        mesh.start()
        single = asyncio.run(_single(mesh))
        results = [asyncio.run(_measure(mesh, k, single["cpu_ms_per_turn"])) for k in (1, 2, 3)]
    finally:
        mesh.close()
        emu.close()
        _ = grpc  # the channels are closed above
    figures = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "what": "runs of 5 turns (4 exec_command turns + an answer) against the provider emulator, "
        "all started at once; 2 replicas of gateway, tools, sessions, tasks; PostgreSQL",
        "single_run": single,
        "results": results,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    Path(OUT).mkdir(parents=True, exist_ok=True)
    (Path(OUT) / "scale_out.json").write_text(json.dumps(figures, indent=2) + "\n")
