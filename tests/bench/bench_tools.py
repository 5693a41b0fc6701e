"""Tool service benchmark (issue 5): figures written to a file, never asserted.

Measures through the production server and a real gRPC channel (SQLite journal):
- exec_command overhead per command (`true`, sequential): p50/p99 milliseconds, sandboxed
  under bubblewrap and, for comparison, unconfined;
- throughput of 16 concurrent commands (`sleep 0.2; echo x`): wall time, commands/second;
- read_file round trip (in process, no spawn): p50/p99 milliseconds;
- a replayed call (answered from the journal): p50 milliseconds.

Usage: python tests/bench/bench_tools.py [OUT.json]   (default .agentrt/bench/tools.json)
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import tempfile
import time

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.tools.config import ToolsConfig
from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _req(ws: str, tool: str, args: dict, call_id: str) -> pb.ExecuteToolRequest:
    call = cpb.ToolCall(call_id=call_id, name=tool, arguments=json.dumps(args))
    return pb.ExecuteToolRequest(run_id="bench", call=call, workspace=ws)


async def _bench(sandbox: str) -> dict:
    tmp = tempfile.mkdtemp()
    server = build_server(ToolsConfig(server=ServerConfig(port=0, state_dir=f"{tmp}/state"), sandbox=sandbox))
    port = await server.start()
    channel = open_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ToolServiceStub(channel)
    ws = f"{tmp}/ws"
    out: dict = {}
    n = 0

    async def timed(tool: str, args: dict, call_id: str | None = None) -> float:
        nonlocal n
        n += 1
        start = time.perf_counter()
        resp = await stub.ExecuteTool(_req(ws, tool, args, call_id or f"c{n}"))
        assert not resp.result.is_error, resp.result.content
        return (time.perf_counter() - start) * 1000

    try:
        await timed("write_file", {"path": "f.txt", "content": "x" * 4096})
        for _ in range(3):
            await timed("exec_command", {"cmd": "true"})  # warm up
        exec_ms = [await timed("exec_command", {"cmd": "true"}) for _ in range(40)]
        out["exec_overhead_ms"] = {"p50": _pct(exec_ms, 0.5), "p99": _pct(exec_ms, 0.99)}
        start = time.perf_counter()
        await asyncio.gather(*(timed("exec_command", {"cmd": "sleep 0.2; echo x"}) for _ in range(16)))
        wall = time.perf_counter() - start
        out["concurrent_16"] = {"wall_s": round(wall, 3), "commands_per_s": round(16 / wall, 1)}
        if sandbox == "bwrap":
            read_ms = [await timed("read_file", {"path": "f.txt"}) for _ in range(100)]
            out["read_file_ms"] = {"p50": _pct(read_ms, 0.5), "p99": _pct(read_ms, 0.99)}
            replay_ms = [await timed("exec_command", {"cmd": "true"}, "c5") for _ in range(50)]
            out["replayed_call_ms"] = {"p50": _pct(replay_ms, 0.5)}
    finally:
        await channel.close()
        await server.stop(grace=0)
    return out


async def main(path: pathlib.Path) -> dict:
    """Run every figure and write them to path as JSON."""
    results = {"bwrap": await _bench("bwrap"), "unconfined": await _bench("unconfined")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".agentrt/bench/tools.json")
    print(json.dumps(asyncio.run(main(target)), indent=2))
