"""Run sandbox benchmark (issue 11): what a run's own sandbox costs, figures written to a file.

Never asserted (`make bench`). The four production servers run in this process (SQLite,
real gRPC loopback channels) against the wire emulator. Each run is one `exec_command`
(`true`) then an answer; per mode, RUNS sequential runs, each timed from StartRun to the
tool service no longer holding its sandbox (for "none": to COMPLETED):
- none: no sandbox (the run's default workspace);
- local: `RunSandbox(backend=LOCAL)`: CreateSandbox at the first batch, DestroySandbox at the end;
- docker: `RunSandbox(backend=DOCKER)`: a container started and removed per run (only when an
  engine and the sandbox image are there; "skipped" otherwise).

Figures: p50/max milliseconds per run, and the p50 difference to "none" (the sandbox's cost).
Usage: python tests/bench/bench_run_sandbox.py [OUT.json] (default bench-results/run_sandbox.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from agentrt.v1 import common_pb2 as cpb  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402
from agentrt.v1 import tool_service_pb2 as tpb  # noqa: E402
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply  # noqa: E402

RUNS = 10
MODES = {"none": None, "local": tpb.SANDBOX_BACKEND_LOCAL, "docker": tpb.SANDBOX_BACKEND_DOCKER}


def _responder(path: str, body: Any) -> Reply:
    if "function_call_output" in json.dumps(body):
        return Reply(text="done")
    return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "true"}))])


async def _one(mesh: Any, tools: Any, backend: int | None) -> float:
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"), tools=[pb.AgentTool(name="exec_command")]
    )
    request = pb.StartRunRequest(agent=agent, input="go")
    if backend is not None:
        request.sandbox.CopyFrom(pb.RunSandbox(backend=backend))  # type: ignore[arg-type]
    begin = time.perf_counter()
    started = await mesh.runs.StartRun(request)
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    if run.status != cpb.RUN_STATUS_COMPLETED:
        raise RuntimeError(f"the run did not complete: {run.failure}")
    if run.sandbox_id:
        while True:
            got = await tools.GetSandbox(tpb.GetSandboxRequest(sandbox_id=run.sandbox_id))
            if got.sandbox.state == tpb.SANDBOX_STATE_ABSENT:
                break
            await asyncio.sleep(0.005)
    return (time.perf_counter() - begin) * 1000


async def measure() -> dict[str, Any]:
    """Run the benchmark once; return its figures."""
    import grpc

    from agentrt.mesh.server import MeshServer
    from agentrt.tools.config import DockerSettings
    from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
    from tests.service.runs.harness import start_mesh
    from tests.service.runs.sandbox_helpers import docker_problem, remove_owned

    servers: list[MeshServer] = []

    async def start(server: MeshServer) -> str:
        port = await server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    emu = ProviderEmulator()
    emu.responder = _responder
    owner = f"agentrt-bench-{os.urandom(4).hex()}"
    problem = await asyncio.to_thread(docker_problem)
    figures: dict[str, Any] = {}
    try:
        mesh = await start_mesh(
            start, pathlib.Path(tempfile.mkdtemp()), emu, tools_kw={"docker": DockerSettings(owner=owner)}
        )
        tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))
        for mode, backend in MODES.items():
            if mode == "docker" and problem:
                figures[mode] = {"skipped": problem}
                continue
            await _one(mesh, tools, backend)  # warm-up, not counted
            samples = [await _one(mesh, tools, backend) for _ in range(RUNS)]
            figures[mode] = {
                "runs": RUNS,
                "p50_ms": round(statistics.median(samples), 1),
                "max_ms": round(max(samples), 1),
            }
    finally:
        for server in reversed(servers):
            await server.stop(grace=0)
        emu.close()
        if not problem:
            await asyncio.to_thread(remove_owned, owner)
    base = figures["none"]["p50_ms"]
    for mode in ("local", "docker"):
        if "p50_ms" in figures[mode]:
            figures[mode]["sandbox_cost_p50_ms"] = round(figures[mode]["p50_ms"] - base, 1)
    return {
        "what": "a one-tool run from StartRun to its sandbox released, in-process, SQLite",
        **figures,
        "cpus": os.cpu_count(),
    }


def main(out: pathlib.Path) -> dict[str, Any]:
    """Measure and write the figures to `out` (JSON)."""
    result = asyncio.run(measure())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "run_sandbox.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    print(json.dumps(main(parser.parse_args().out), indent=2))
