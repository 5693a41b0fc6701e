"""Named-shell benchmark (004 §2.7k): figures written to a file, never asserted.

Through the production server and a real gRPC channel (SQLite journal), under bubblewrap:
- shell round trip: `true` in an already open named shell, sequential: p50/p99 ms;
- one-shot exec: `true` without session_id (a new isolated bash each time): p50/p99 ms;
- shell open: the first call of a new name (launch + handshake + `true`): p50/p99 ms;
- shell state: `cd` + `export` then reading them back (two calls), p50 ms;
- in process, without gRPC or the journal: the pool's round trip, p50/p99 ms.

Usage: python tests/bench/bench_shells.py [OUT.json]   (default .agentrt/bench/shells.json)
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
from agentrt.tools.config import CommandLimits, ToolsConfig
from agentrt.tools.files.paths import open_workspace
from agentrt.tools.server import build_server
from agentrt.tools.shell.pool import ShellPool
from agentrt.tools.shell.session import ShellCommand
from agentrt.tools.shell.terminal import local_binaries, open_local
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

ROUNDS = 200


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _stats(samples: list[float]) -> dict:
    return {"p50": _pct(samples, 0.5), "p99": _pct(samples, 0.99), "n": len(samples)}


async def _grpc(tmp: str) -> dict:
    server = build_server(ToolsConfig(server=ServerConfig(port=0, state_dir=f"{tmp}/state")))
    port = await server.start()
    channel = open_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ToolServiceStub(channel)
    ws = f"{tmp}/ws"
    n = 0

    async def timed(args: dict) -> float:
        nonlocal n
        n += 1
        call = cpb.ToolCall(call_id=f"c{n}", name="exec_command", arguments=json.dumps(args))
        start = time.perf_counter()
        resp = await stub.ExecuteTool(pb.ExecuteToolRequest(run_id="bench", call=call, workspace=ws))
        assert not resp.result.is_error, resp.result.content
        return (time.perf_counter() - start) * 1000

    out: dict = {}
    try:
        for _ in range(5):  # warm up both paths
            await timed({"cmd": "true"})
            await timed({"cmd": "true", "session_id": "bench"})
        out["shell_round_trip_ms"] = _stats(
            [await timed({"cmd": "true", "session_id": "bench"}) for _ in range(ROUNDS)]
        )
        out["one_shot_exec_ms"] = _stats([await timed({"cmd": "true"}) for _ in range(ROUNDS // 4)])
        out["shell_open_ms"] = _stats(
            [await timed({"cmd": "true", "session_id": f"new{i}"}) for i in range(25)]
        )
        state = []
        for i in range(50):
            start = time.perf_counter()
            await timed({"cmd": f"cd /tmp && export V={i}", "session_id": "state"})
            await timed({"cmd": 'test "$V" = ' + str(i) + ' && test "$PWD" = /tmp', "session_id": "state"})
            state.append((time.perf_counter() - start) * 1000)
        out["cd_export_then_read_ms"] = {"p50": _pct(state, 0.5)}
    finally:
        await channel.close()
        await server.stop(grace=0)
    return out


async def _pool(tmp: str) -> dict:
    ws = open_workspace(f"{tmp}/pool-ws", make_parents=True, sandbox_uid=65534, sandbox_gid=65534)
    bins = local_binaries("bwrap")
    pool = ShellPool(max_shells=4, idle_seconds=600, max_progress_bytes=1 << 20)

    async def opener():
        return await open_local(bins, "bwrap", ws, {}, CommandLimits())

    key = ("bench", "workspace:" + ws.path, "s")
    cmd = ShellCommand("true", "", 20.0, 65536)
    try:
        for _ in range(5):
            await pool.run(key, opener, cmd, emit=None, deadline=None)
        samples = []
        for _ in range(ROUNDS * 5):
            start = time.perf_counter()
            result = await pool.run(key, opener, cmd, emit=None, deadline=None)
            samples.append((time.perf_counter() - start) * 1000)
            assert result.exit_code == 0
        return {"pool_round_trip_ms": _stats(samples)}
    finally:
        await pool.close()


async def main(path: pathlib.Path) -> dict:
    """Run every figure and write them to path as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        results = {"grpc": await _grpc(tmp), "in_process": await _pool(tmp)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".agentrt/bench/shells.json")
    print(json.dumps(asyncio.run(main(target)), indent=2))
