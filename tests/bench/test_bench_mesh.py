"""Benchmarks of the whole mesh (`make bench`): figures go to $AGENTRT_BENCH_DIR, never asserted.

- mesh start: `start_mesh` until every health check is SERVING, in seconds.
- emulated runs: runs of two turns (exec_command, then an answer) against the provider
  emulator, one after another: wall time per run and per turn, i.e. the mesh's own overhead
  (gateway, tools, sessions, run log, events) with a model that answers at once.
- local model: the demo task with llama.cpp + SmolLM2-135M: time per model call and per run.

Not collected by `make test` (pyproject testpaths leave tests/bench out); `make bench` runs them.
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import time
from pathlib import Path

import pytest
from rich.console import Console

from agentrt.cli.demo import DEMO_TASK, model_call_seconds
from agentrt.cli.ports import free_ports
from agentrt.cli.run import build_agent, follow_run, parse_model, terminal_approver
from agentrt.cli.serve import SERVICES
from agentrt.cli.up import start_mesh
from agentrt.client.channels import MeshClient
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply

OUT = os.environ.get("AGENTRT_BENCH_DIR", "bench-results")

EMULATED_RUNS = 20


def _write(name: str, figures: dict) -> None:
    figures = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, **figures}
    path = Path(OUT) / name
    path.write_text(json.dumps(figures, indent=2) + "\n")


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "mean": round(statistics.fmean(ordered), 4),
        "p50": round(ordered[len(ordered) // 2], 4),
        "p95": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 4),
        "max": round(ordered[-1], 4),
    }


async def _run(runs: str, agent: pb.AgentSpec, task: str, workspace: Path):
    client = MeshClient(runs=runs)
    console = Console(file=io.StringIO())
    try:
        request = pb.StartRunRequest(agent=agent, input=task, workspace=str(workspace))
        return await follow_run(client, request, console, terminal_approver(console, True, False))
    finally:
        await client.close()


async def test_bench_emulated_runs(tmp_path):
    with ProviderEmulator() as emu:
        env = {"AGENTRT_OPENAI_BASE_URL": emu.base_url + "/v1", "AGENTRT_OPENAI_API_KEY": "bench"}
        began = time.perf_counter()
        mesh = start_mesh(tmp_path / "state", ports=dict(zip(SERVICES, free_ports(5), strict=True)), env=env)
        start_seconds = time.perf_counter() - began
        try:
            agent = build_agent(cpb.ModelRef(provider="openai", model="gpt-bench"), max_turns=4)
            per_run = []
            for i in range(EMULATED_RUNS):
                emu.script(
                    [
                        Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi > f.txt"}')]),
                        Reply(text="done"),
                    ]
                )
                t0 = time.perf_counter()
                outcome = await _run(mesh.addresses["runs"], agent, "write f.txt", tmp_path / f"ws{i}")
                per_run.append(time.perf_counter() - t0)
                assert outcome.completed
        finally:
            mesh.stop()
    _write(
        "mesh_emulated.json",
        {
            "mesh_start_seconds": round(start_seconds, 3),
            "run_seconds": _summary(per_run),
            "turn_seconds_mean": round(statistics.fmean(per_run) / 2, 4),
            "runs": EMULATED_RUNS,
            "turns_per_run": 2,
        },
    )


@pytest.mark.local_model
async def test_bench_local_model_run(tmp_path):
    pytest.importorskip("llama_cpp")
    began = time.perf_counter()
    mesh = start_mesh(tmp_path / "state", ports=dict(zip(SERVICES, free_ports(5), strict=True)))
    start_seconds = time.perf_counter() - began
    try:
        agent = build_agent(parse_model("local"), max_turns=6)
        t0 = time.perf_counter()
        outcome = await _run(mesh.addresses["runs"], agent, DEMO_TASK, tmp_path / "ws")
        run_seconds = time.perf_counter() - t0
    finally:
        mesh.stop()
    calls = model_call_seconds(outcome.events)
    _write(
        "local_model.json",
        {
            "mesh_start_seconds": round(start_seconds, 3),
            "run_seconds": round(run_seconds, 3),
            "status": int(outcome.run.status),
            "turns": outcome.run.turns,
            "model_call_seconds": [round(c, 3) for c in calls],
            "input_tokens": outcome.run.usage.input_tokens,
            "output_tokens": outcome.run.usage.output_tokens,
        },
    )
