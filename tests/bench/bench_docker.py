"""Docker sandbox benchmark (issue 5): figures written to a file, never asserted.

Measures through the production server and a real gRPC channel (SQLite journal), each
backend in a sandbox of its own (CreateSandbox):
- exec_command overhead per command (`true`, sequential): p50/p99 milliseconds, for the
  docker backend (`docker exec` of the keeper in a persistent container) and the local one
  (bubblewrap);
- 16 concurrent commands (`sleep 0.2; echo x`): wall time, commands/second;
- docker only: CreateSandbox of a new container, and of an adopted one, milliseconds.

Needs a running engine and the image of scripts/docker-sandbox-image.sh.
Usage: python tests/bench/bench_docker.py [OUT.json]   (default .agentrt/bench/docker.json)
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.tools.config import DockerSettings, ToolsConfig
from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

BACKENDS = {"docker": pb.SANDBOX_BACKEND_DOCKER, "local": pb.SANDBOX_BACKEND_LOCAL}


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def _bench(stub: pb_grpc.ToolServiceStub, backend: str) -> dict:
    out: dict = {}
    sandbox_id = f"sbx_bench_{backend}"
    create = pb.CreateSandboxRequest(sandbox_id=sandbox_id, backend=BACKENDS[backend])
    start = time.perf_counter()
    await stub.CreateSandbox(create)
    created_ms = (time.perf_counter() - start) * 1000
    n = 0

    async def timed(cmd: str) -> float:
        nonlocal n
        n += 1
        call = cpb.ToolCall(call_id=f"c{n}", name="exec_command", arguments=json.dumps({"cmd": cmd}))
        req = pb.ExecuteToolRequest(run_id=f"bench_{backend}", call=call, sandbox_id=sandbox_id)
        begin = time.perf_counter()
        resp = await stub.ExecuteTool(req)
        assert not resp.result.is_error, resp.result.content
        return (time.perf_counter() - begin) * 1000

    for _ in range(3):
        await timed("true")  # warm up
    exec_ms = [await timed("true") for _ in range(40)]
    out["exec_overhead_ms"] = {"p50": _pct(exec_ms, 0.5), "p99": _pct(exec_ms, 0.99)}
    start = time.perf_counter()
    await asyncio.gather(*(timed("sleep 0.2; echo x") for _ in range(16)))
    wall = time.perf_counter() - start
    out["concurrent_16"] = {"wall_s": round(wall, 3), "commands_per_s": round(16 / wall, 1)}
    if backend == "docker":
        start = time.perf_counter()
        await stub.CreateSandbox(create)
        out["create_sandbox_ms"] = {
            "new_container": round(created_ms, 1),
            "adopted": round((time.perf_counter() - start) * 1000, 1),
        }
    await stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id=sandbox_id))
    return out


async def main(path: pathlib.Path) -> dict:
    """Run every figure and write them to path as JSON."""
    tmp = tempfile.mkdtemp()
    owner = f"agentrt-bench-{os.urandom(4).hex()}"
    config = ToolsConfig(
        server=ServerConfig(port=0, state_dir=f"{tmp}/state"), docker=DockerSettings(owner=owner)
    )
    server = build_server(config)
    port = await server.start()
    channel = open_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ToolServiceStub(channel)
    try:
        results = {backend: await _bench(stub, backend) for backend in BACKENDS}
    finally:
        await channel.close()
        await server.stop(grace=0)
        shutil.rmtree(tmp, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".agentrt/bench/docker.json")
    print(json.dumps(asyncio.run(main(target)), indent=2))
