"""The gateway's CPU per model call in a turn's shape (issue 15; decision 0041).

Figures are written to a JSON file, never asserted (`make bench`). The shape is what the run
loop asks of the gateway when the model answers at once (`bench_turn.py`'s runs), with only
the gateway and the wire emulator in the chain:
- the wire emulator as its own process (`python -m tests.emulators.providers`);
- the gateway as its own process (`python -m agentrt.cli.main serve gateway`, gated on
  grpc.health SERVING) with every remote provider pointed at the emulator, its journal on
  its SQLite file and the limiter in memory (the defaults of `agentrt up`);
- this process as the run loop: "runs" of 10 `read_file` tool turns and a final answer
  (11 model calls), one after another, each call keyed as the loop keys it
  (`<run>/turn-<n>/ctx-<seq>-<leaf>`) and carrying the loop's request: the agent's
  instructions, the catalog's `read_file` spec, the transcript so far (the task, then per
  turn the assistant's tool call and its result). By default each run sends its calls over
  one `StreamGenerateCalls` stream, as the run loop does (`--transport rpc`: one
  `StreamGenerate` RPC per call, the loop's fallback).

Per provider adapter (openai: Responses, openai-chat: Chat Completions, anthropic:
Messages), in rounds that alternate the providers' order, the figures are:
- cpu_ms_per_call: the gateway process's CPU (user + system, from /proc/<pid>/stat) over
  the round divided by its calls; median and every round's value;
- wall_ms: per-call latency (send to final) p50 and p90 over all rounds;
- messages_per_call: the stream messages a call carried (deltas and its final);
- emulator_cpu_ms_per_call, client_cpu_ms_per_call: the other two processes, for context.
On a shared machine compare CPU, not wall time, and A/B alternately: `--services DIR` runs
the gateway from another checkout's `services/` (e.g. an export of main) with this script.

Usage: python tests/bench/bench_gateway_turns.py [OUT.json] [--runs N] [--rounds R]
[--providers openai,openai-chat,anthropic] [--transport calls|rpc] [--services DIR]
[--profile FILE]
(default bench-results/gateway_turns.json, 10 runs of 11 calls per provider and round, 5 rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import grpc

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "services"))

from agentrt.client.calls import ERROR, EVENT, FINAL, CallStream  # noqa: E402
from agentrt.mesh.context import TENANT_HEADER  # noqa: E402
from agentrt.v1 import common_pb2 as c  # noqa: E402
from agentrt.v1 import gateway_service_pb2 as pb  # noqa: E402
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc  # noqa: E402

PROVIDERS = ("openai", "openai-chat", "anthropic")
TURNS = 10
TENANT = "bench"
INSTRUCTIONS = "You are a coding agent. Read the files you are asked about and answer briefly."
TASK = "Read notes.txt and tell me what it says."
ARGUMENTS = '{"path": "notes.txt"}'
RESULT = "hello\n"
#: The catalog's read_file (tools/calls/catalog.py), as the run loop offers it.
READ_FILE = c.ToolSpec(
    name="read_file",
    description="Read a text file in the workspace. Large files keep their beginning and end.",
    parameters_json_schema=json.dumps(
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."}
            },
            "required": ["path"],
            "additionalProperties": False,
        }
    ),
    read_only=True,
    retry_safe=True,
)
READ_FILE.timeout.FromSeconds(30)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    mine = os.times()
    return mine.user + mine.system


def _script() -> list[dict[str, Any]]:
    """The emulator's replies of one run: 10 read_file calls, then an answer."""
    call = {"name": "read_file", "arguments": ARGUMENTS}
    return [*({"tool_calls": [call]} for _ in range(TURNS)), {"text": "It says hello."}]


def turn_request(provider: str, run_id: str, turn: int) -> pb.ModelRequest:
    """Return the request of a run's turn (1-based): the transcript of the turns before it."""
    messages = [c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text=TASK))])]
    for t in range(1, turn):
        call_id = f"call_{run_id[-8:]}_{t}"
        tool_use = c.ToolCall(
            call_id=call_id, name="read_file", arguments=ARGUMENTS, provider_call_id=call_id
        )
        messages.append(c.Message(role=c.ROLE_ASSISTANT, content=[c.ContentBlock(tool_use=tool_use)]))
        result = c.ToolResult(call_id=call_id, name="read_file", content=RESULT)
        messages.append(c.Message(role=c.ROLE_USER, content=[c.ContentBlock(tool_result=result)]))
    seq = 2 * turn - 1
    return pb.ModelRequest(
        model=c.ModelRef(provider=provider, model="gpt-bench" if provider != "anthropic" else "claude-bench"),
        system=INSTRUCTIONS,
        messages=messages,
        tools=[READ_FILE],
        settings=c.ModelSettings(),
        tenant=TENANT,
        run_id=run_id,
        idempotency_key=f"{run_id}/turn-{turn}/ctx-{seq}-e{seq:04d}",
    )


class Processes:
    """The emulator and the gateway as processes (see the module docstring)."""

    def __init__(self, tmp: pathlib.Path, services: pathlib.Path, profile: str = "") -> None:
        from agentrt.cli.ports import free_ports

        self.emu_port, self.gw_port = free_ports(2)
        self.emu_url = f"http://127.0.0.1:{self.emu_port}"
        self.address = f"127.0.0.1:{self.gw_port}"
        path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        self._logs = [open(tmp / "emulator.log", "w"), open(tmp / "gateway.log", "w")]  # noqa: SIM115
        self.emulator = subprocess.Popen(
            [sys.executable, "-m", "tests.emulators.providers", "--port", str(self.emu_port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._logs[0],
            env={**os.environ, "PYTHONPATH": path},
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(services), path]),
            "AGENTRT_OPENAI_BASE_URL": self.emu_url + "/v1",
            "AGENTRT_OPENAI_API_KEY": "bench",
            "AGENTRT_ANTHROPIC_BASE_URL": self.emu_url,
            "AGENTRT_ANTHROPIC_API_KEY": "bench",
            "AGENTRT_DEFAULT_MODEL": "openai:gpt-bench",
            "AGENTRT_LOCAL_MODEL_PATH": "/nonexistent.gguf",
            "AGENTRT_STATE_DIR": str(tmp / "state"),
            "AGENTRT_LOG_LEVEL": "WARNING",
        }
        serve = ["serve", "gateway", "--port", str(self.gw_port)]
        command = [sys.executable, "-m", "agentrt.cli.main", *serve]
        if profile:
            command = [sys.executable, "-c", _PROFILED, profile, *serve]
        self.gateway = subprocess.Popen(
            command,
            cwd=tmp,
            stdout=self._logs[1],
            stderr=subprocess.STDOUT,
            env=env,
        )

    async def wait_ready(self, timeout: float = 60.0) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                for proc in (self.emulator, self.gateway):
                    if proc.poll() is not None:
                        raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
                try:
                    answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("gateway not SERVING in time")

    def script(self, replies: list[dict[str, Any]]) -> None:
        data = json.dumps(replies).encode()
        request = urllib.request.Request(
            self.emu_url + "/_emulator/script", data=data, headers={"content-type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=10).read()

    def stop(self) -> None:
        for proc in (self.gateway, self.emulator):
            proc.terminate()
            proc.wait(timeout=30)
        for log in self._logs:
            log.close()


#: The gateway under cProfile on the CPU time of its main thread (`--profile FILE`): what
#: the process computes, not what it waits for; on from SIGUSR1 (sent after the warm-up),
#: the stats written at its exit.
_PROFILED = """
import cProfile, signal, sys, time
from agentrt.cli.main import main
out, args = sys.argv[1], sys.argv[2:]
prof = cProfile.Profile(time.thread_time)
signal.signal(signal.SIGUSR1, lambda *_: prof.enable())
try:
    main(args)
except SystemExit:
    pass
finally:
    prof.disable()
    prof.dump_stats(out)
"""


def _split(answer: pb.StreamGenerateCallsResponse) -> tuple[int, str, Any]:
    if answer.HasField("error"):
        return answer.call_id, ERROR, answer.error
    return answer.call_id, FINAL if answer.event.WhichOneof("event") == "final" else EVENT, answer.event


class Caller:
    """The run loop's side: one stream of calls per run, or one RPC per call."""

    def __init__(self, address: str, transport: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = pb_grpc.ModelGatewayServiceStub(self.channel)
        self.transport = transport
        self.metadata = [(TENANT_HEADER, TENANT)]

    async def run(self, provider: str, run_id: str, walls: list[float], messages: list[int]) -> None:
        """Make one run's 11 calls in order; append each call's wall ms and message count."""
        stream = CallStream(
            lambda: self.stub.StreamGenerateCalls(metadata=self.metadata),
            lambda header, request: pb.StreamGenerateCallsRequest(header=header, request=request),
            _split,
        )
        try:
            for turn in range(1, TURNS + 2):
                request = turn_request(provider, run_id, turn)
                seen = [1]
                start = time.perf_counter()
                if self.transport == "calls":
                    final = await stream.call(
                        request, timeout=60, on_event=lambda _m, seen=seen: seen.append(1)
                    )
                else:
                    final = None
                    async for item in self.stub.StreamGenerate(
                        pb.StreamGenerateRequest(request=request), metadata=self.metadata, timeout=60
                    ):
                        if item.WhichOneof("event") == "final":
                            final = item
                        else:
                            seen.append(1)
                walls.append((time.perf_counter() - start) * 1000)
                messages.append(len(seen))
                if final is None or final.final.replayed:
                    raise RuntimeError(f"{provider} turn {turn}: no fresh final ({final})")
                want = c.STOP_REASON_TOOL_USE if turn <= TURNS else c.STOP_REASON_END_TURN
                if final.final.response.stop_reason != want:
                    raise RuntimeError(f"{provider} turn {turn}: {final.final.response}")
        finally:
            stream.close()

    async def close(self) -> None:
        await self.channel.close()


async def bench(
    providers: tuple[str, ...],
    runs: int,
    rounds: int,
    transport: str,
    services: pathlib.Path,
    profile: str = "",
) -> dict[str, Any]:
    """Measure and return the figures (see the module docstring)."""
    cpu: dict[str, list[float]] = {p: [] for p in providers}
    emu_cpu: dict[str, list[float]] = {p: [] for p in providers}
    own_cpu: dict[str, list[float]] = {p: [] for p in providers}
    walls: dict[str, list[float]] = {p: [] for p in providers}
    counts: dict[str, list[int]] = {p: [] for p in providers}
    loads: list[float] = []
    serial = 0
    with tempfile.TemporaryDirectory() as tmp:
        procs = Processes(pathlib.Path(tmp), services, profile)
        caller = Caller(procs.address, transport)
        try:
            await procs.wait_ready()
            for provider in providers:  # warm-up: connections, imports, the journal's file
                await asyncio.to_thread(procs.script, _script())
                await caller.run(provider, f"warm-{provider}", [], [])
            if profile:
                procs.gateway.send_signal(signal.SIGUSR1)
            for r in range(rounds):
                loads.append(os.getloadavg()[0])
                order = providers if r % 2 == 0 else tuple(reversed(providers))
                for provider in order:
                    await asyncio.to_thread(procs.script, _script() * runs)
                    g0, e0, o0 = _cpu_s(procs.gateway.pid), _cpu_s(procs.emulator.pid), _own_cpu_s()
                    for _ in range(runs):
                        serial += 1
                        await caller.run(provider, f"run-{serial:06d}", walls[provider], counts[provider])
                    g1, e1, o1 = _cpu_s(procs.gateway.pid), _cpu_s(procs.emulator.pid), _own_cpu_s()
                    calls = runs * (TURNS + 1)
                    cpu[provider].append(round((g1 - g0) * 1000 / calls, 3))
                    emu_cpu[provider].append(round((e1 - e0) * 1000 / calls, 3))
                    own_cpu[provider].append(round((o1 - o0) * 1000 / calls, 3))
                    print(
                        f"round {r + 1} {provider:<12} gateway CPU {cpu[provider][-1]:.3f} ms/call, "
                        f"wall p50 {_pct(walls[provider][-calls:], 0.5):.2f} ms",
                        flush=True,
                    )
        finally:
            await caller.close()
            procs.stop()
    return {
        "what": "the gateway process's CPU per model call, turns of a read_file run (decision 0041)",
        "transport": transport,
        "calls_per_round": runs * (TURNS + 1),
        "rounds": rounds,
        "services": str(services),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_at_rounds": [round(x, 2) for x in loads],
        "providers": {
            p: {
                "cpu_ms_per_call": {"median": round(statistics.median(cpu[p]), 3), "rounds": cpu[p]},
                "wall_ms": {"p50": _pct(walls[p], 0.5), "p90": _pct(walls[p], 0.9)},
                "messages_per_call": round(statistics.mean(counts[p]), 2),
                "emulator_cpu_ms_per_call": round(statistics.median(emu_cpu[p]), 3),
                "client_cpu_ms_per_call": round(statistics.median(own_cpu[p]), 3),
            }
            for p in providers
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "gateway_turns.json"
    parser.add_argument("out", nargs="?", default=str(default))
    parser.add_argument("--runs", type=int, default=10, help="runs of 11 calls per provider and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--transport", choices=("calls", "rpc"), default="calls")
    parser.add_argument("--services", default=str(ROOT / "services"), help="where the gateway's agentrt is")
    parser.add_argument("--profile", default="", help="write the gateway's cProfile stats (thread CPU) here")
    args = parser.parse_args(argv)
    providers = tuple(p for p in args.providers.split(",") if p)
    unknown = set(providers) - set(PROVIDERS)
    if unknown:
        parser.error(f"unknown providers: {', '.join(sorted(unknown))}")
    figures = asyncio.run(
        bench(
            providers,
            args.runs,
            args.rounds,
            args.transport,
            pathlib.Path(args.services).resolve(),
            str(pathlib.Path(args.profile).resolve()) if args.profile else "",
        )
    )
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    for p, f in figures["providers"].items():
        print(
            f"{p:<12} gateway CPU {f['cpu_ms_per_call']['median']:.3f} ms/call (median of rounds), "
            f"wall p50 {f['wall_ms']['p50']:.2f} ms, {f['messages_per_call']} messages/call"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
