"""Benchmark (`make bench`): runs per minute at 1, 2 and 3 runs replicas, on PostgreSQL.

The scaled-out mesh of the issue 13 acceptance (tests/e2e/scale_helpers.py: three runs
replicas, two of every other service, each its own process, one DNS name per service) with
the provider emulator answering at once. For k = 1, 2, 3 the runs name resolves to the
first k replicas only, and BENCH_RUNS (64) runs of 5 turns (4 tool turns appending a line,
then an answer) are started at once through it; the figure is runs completed per minute of
wall time, from the first StartRun to the last run's completion (every run must complete).
Written to $AGENTRT_BENCH_DIR/scale_out.json; never asserted (a 2-core machine shared by
other work mostly measures its cores: see docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from scale_helpers import ZONE, Responder, ScaledMesh  # noqa: E402

from agentrt.client.channels import open_channel  # noqa: E402
from agentrt.v1 import common_pb2 as cpb  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402
from agentrt.v1 import run_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.emulators.providers import ProviderEmulator  # noqa: E402
from tests.stores import pg_reachable  # noqa: E402

OUT = os.environ.get("AGENTRT_BENCH_DIR", "bench-results")
BENCH_RUNS = int(os.environ.get("AGENTRT_BENCH_SCALE_RUNS", "64"))
TURNS = 5
_DONE = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED, cpb.RUN_STATUS_SUSPENDED)


async def _measure(mesh: ScaledMesh, replicas: int) -> dict[str, object]:
    mesh.zone.addresses[f"runs.{ZONE}"] = [r.host for r in mesh.runs[:replicas]]
    channel = open_channel(mesh.target("runs"))
    stub = pb_grpc.RunServiceStub(channel)
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command")],
        limits=pb.AgentLimits(max_turns=TURNS + 1),
    )
    try:
        began = time.monotonic()
        started = await asyncio.gather(
            *(
                stub.StartRun(
                    pb.StartRunRequest(
                        agent=agent,
                        input=f"bench scale:k{replicas}-{i}",
                        workspace=str(mesh.root / "work" / f"k{replicas}-{i}"),
                    ),
                    timeout=60,
                )
                for i in range(BENCH_RUNS)
            )
        )
        pending = {s.run_id for s in started}
        statuses: dict[int, int] = {}
        while pending:
            for run_id in list(pending):
                run = (await stub.GetRun(pb.GetRunRequest(run_id=run_id), timeout=30)).run
                if run.status in _DONE:
                    pending.discard(run_id)
                    statuses[run.status] = statuses.get(run.status, 0) + 1
            await asyncio.sleep(0.1)
        seconds = time.monotonic() - began
    finally:
        await channel.close()
    return {
        "runs_replicas": replicas,
        "concurrent_runs": BENCH_RUNS,
        "turns_per_run": TURNS,
        "seconds": round(seconds, 2),
        "runs_per_minute": round(BENCH_RUNS / seconds * 60, 1),
        "completed": statuses.get(cpb.RUN_STATUS_COMPLETED, 0),
        "not_completed": {
            cpb.RunStatus.Name(k): v for k, v in statuses.items() if k != cpb.RUN_STATUS_COMPLETED
        },
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
        results = [asyncio.run(_measure(mesh, k)) for k in (1, 2, 3)]
    finally:
        mesh.close()
        emu.close()
        _ = grpc  # the channels are closed above
    figures = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "what": "runs of 5 turns (4 exec_command turns + an answer) against the provider emulator, "
        "all started at once; 2 replicas of gateway, tools, sessions, tasks; PostgreSQL",
        "results": results,
    }
    Path(OUT).mkdir(parents=True, exist_ok=True)
    (Path(OUT) / "scale_out.json").write_text(json.dumps(figures, indent=2) + "\n")
