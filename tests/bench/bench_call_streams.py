"""What a call costs as its own RPC and as a message on a stream of calls (decision 0023).

Figures are written to a file, never asserted (`make bench`). Two processes, as the mesh
runs: a grpc.aio server composed as `MeshServer` composes it (the telemetry interceptor,
then the MeshInterceptor) serving one unary method and one bidirectional method that
answers each message at once, and a client on `open_channel` (the run loop's channel
options: wait_for_ready, the fenced retry policy). The payload is a 300-byte message. Per
mode, calls are made one after another (the next only after the answer), in rounds
interleaved across the modes:
- unary: a new RPC per call (what a turn's ExecuteTool or AppendEntries was);
- stream: a request and its answer on a bidi stream already open (a stream of calls);
- stream_idle_2ms, stream_idle_10ms: the same stream call, made after both processes sat idle
  for 2 or 10 ms (the client sleeps between calls; a quarter of the calls). A process of the
  mesh is woken this way at every hop of a turn (it idles while the others work), and the
  same call then costs more CPU than back to back: the caches it left warm were used by the
  other processes (on 2 CPUs, 6 processes) and its threads are woken from sleep.
- uds_stream, uds_stream_idle_10ms: the gRPC stream over a Unix domain socket instead of TCP;
- raw_stream, raw_stream_idle_10ms: the same message, answered the same way, over a plain
  TCP connection on the same event loops (uvloop), framed by a 4-byte length, without gRPC:
  what a transport of our own would cost per hop (a measurement for that decision; the mesh
  has no such transport).
Reported per call: the client's and the server's CPU time (user + system, from /proc and
os.times, so other processes' load does not count) and the wall time, medians over rounds.

Usage: python tests/bench/bench_call_streams.py [OUT.json] [--calls N] [--rounds R]
(default bench-results/call_streams.json, 2000 calls, 5 rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import socket
import statistics
import struct
import subprocess
import sys
import time

import grpc
from google.protobuf import wrappers_pb2 as w
from prometheus_client import CollectorRegistry

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "services"))

UNARY = "/agentrt.v1.SessionService/AppendEntries"  # a fenced method: the retry policy applies
STREAM = "/agentrt.v1.SessionService/AppendEntriesCalls"


def _ser(message: w.BytesValue) -> bytes:
    return message.SerializeToString()


async def _serve(port_file: str) -> None:
    from agentrt.mesh.interceptors import MeshInterceptor
    from agentrt.mesh.telemetry.metrics import RpcMetrics
    from agentrt.mesh.telemetry.rpc import TelemetryServerInterceptor

    async def unary(request: w.BytesValue, context: object) -> w.BytesValue:
        return request

    async def stream(requests, context):  # type: ignore[no-untyped-def]
        async for request in requests:
            yield request

    class Handlers(grpc.GenericRpcHandler):
        def service(self, details):  # type: ignore[no-untyped-def]
            if details.method == UNARY:
                return grpc.unary_unary_rpc_method_handler(unary, w.BytesValue.FromString, _ser)
            if details.method == STREAM:
                return grpc.stream_stream_rpc_method_handler(stream, w.BytesValue.FromString, _ser)
            return None

    interceptors = [TelemetryServerInterceptor(RpcMetrics(CollectorRegistry())), MeshInterceptor()]
    server = grpc.aio.server(interceptors=interceptors)
    server.add_generic_rpc_handlers((Handlers(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.add_insecure_port(f"unix:{port_file}.sock")
    await server.start()
    raw = await asyncio.start_server(_raw_echo, "127.0.0.1", 0)
    raw_port = raw.sockets[0].getsockname()[1]
    pathlib.Path(port_file).write_text(f"{port} {raw_port}")
    await server.wait_for_termination()


async def _raw_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each length-framed BytesValue with itself, parsed and encoded again (raw modes)."""
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            (size,) = struct.unpack("!I", await reader.readexactly(4))
            body = _ser(w.BytesValue.FromString(await reader.readexactly(size)))
            writer.write(struct.pack("!I", len(body)) + body)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The idle modes: how long both processes sit idle before each call, seconds.
IDLE_S = {
    "stream_idle_2ms": 0.002,
    "stream_idle_10ms": 0.010,
    "uds_stream_idle_10ms": 0.010,
    "raw_stream_idle_10ms": 0.010,
}
#: The modes, in the order each round runs them.
MODES = (
    "unary",
    "stream",
    "stream_idle_2ms",
    "stream_idle_10ms",
    "uds_stream",
    "uds_stream_idle_10ms",
    "raw_stream",
    "raw_stream_idle_10ms",
)


async def _round(
    address: str, raw_port: int, uds: str, mode: str, calls: int, server_pid: int
) -> dict[str, float]:
    from agentrt.client.channels import open_channel

    if mode.startswith("uds_"):
        address = f"unix:{uds}"
    channel = open_channel(address, tenant="default", wait_for_ready=True, fenced=True)
    message = w.BytesValue(value=b"x" * 300)
    writer: asyncio.StreamWriter | None = None
    try:
        if mode.startswith("raw_"):
            reader, writer = await asyncio.open_connection("127.0.0.1", raw_port)
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            raw_writer = writer

            async def one() -> None:
                body = _ser(message)
                raw_writer.write(struct.pack("!I", len(body)) + body)
                (size,) = struct.unpack("!I", await reader.readexactly(4))
                w.BytesValue.FromString(await reader.readexactly(size))

        elif mode == "unary":
            call = channel.unary_unary(UNARY, _ser, w.BytesValue.FromString)

            async def one() -> None:
                await call(message, timeout=30)

        else:
            stream = channel.stream_stream(STREAM, _ser, w.BytesValue.FromString)()

            async def one() -> None:
                await stream.write(message)
                await stream.read()

        for _ in range(100):  # warm the channel and the caches
            await one()
        idle = IDLE_S.get(mode, 0.0)
        if idle:
            calls = max(1, calls // 4)
        server0, mine0, wall0 = _cpu_of(server_pid), os.times(), time.perf_counter()
        for _ in range(calls):
            if idle:
                time.sleep(idle)  # the client's loop idles too (nothing else runs in it)
            await one()
        wall, mine1, server1 = time.perf_counter() - wall0, os.times(), _cpu_of(server_pid)
        wall -= calls * idle
    finally:
        if writer is not None:
            writer.close()
        await channel.close()
    client_s = (mine1.user + mine1.system) - (mine0.user + mine0.system)
    return {
        "client_cpu_us": round(client_s / calls * 1e6, 1),
        "server_cpu_us": round((server1 - server0) / calls * 1e6, 1),
        "wall_us": round(wall / calls * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure both modes and write the figures (see the module docstring)."""
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "call_streams.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        import uvloop

        uvloop.run(_serve(args.serve))  # as `agentrt serve` runs a service
        return 0
    port_file = args.out.with_suffix(".port")
    port_file.parent.mkdir(parents=True, exist_ok=True)
    port_file.unlink(missing_ok=True)
    uds = pathlib.Path(f"{port_file}.sock")
    uds.unlink(missing_ok=True)
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        grpc_port, raw_port = port_file.read_text().split()
        address = f"127.0.0.1:{grpc_port}"
        samples: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        import uvloop

        for _ in range(args.rounds):
            for mode in samples:
                one = _round(address, int(raw_port), str(uds), mode, args.calls, server.pid)
                samples[mode].append(uvloop.run(one))
    finally:
        server.terminate()
        server.wait(10)
        port_file.unlink(missing_ok=True)
        uds.unlink(missing_ok=True)
    result: dict[str, object] = {"calls_per_round": args.calls, "rounds": args.rounds}
    for mode, rounds in samples.items():
        result[mode] = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
