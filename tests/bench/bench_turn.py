"""Turn-cost benchmark: what one turn through the durable mesh costs with an instant model.

Figures are written to a file, never asserted (`make bench`). Measured with SQLite (the
embedded default) over real gRPC loopback channels, in two shapes:
- "in_process": the four production servers (sessions, tools, gateway, runs) and the
  wire emulator in this one process: one event loop, one GIL;
- "multi_process": the deployment shape: the five services spawned by
  `agentrt.cli.up.start_mesh` (`python -m agentrt.cli.main serve <svc>`, gated on
  grpc.health SERVING), the emulator in its own process (`python -m tests.emulators.providers`),
  this process only starting runs and reading their event streams;
- "one_process" (only when asked): as multi_process, the five services one process
  (`agentrt serve all`: the run loop calls its peers without the wire, decision 0056).

Figures:
- sdk_round_trip_ms: the official openai SDK calling the emulator directly (the floor a
  turn cannot go under: HTTP + JSON of one model call);
- turn_ms: wall time of a run (StartRun until its stream ends) divided by its turns, for
  runs of `TURNS` read_file tool turns (no process spawned) plus a final answer; every
  turn renders the session, streams the model, executes the tool, writes the save points
  and the session batch, and publishes events;
- overhead_ms_p50: turn_ms p50 minus sdk_round_trip_ms p50: what the mesh adds per turn;
- phases_ms_per_turn (in-process only): mean time per turn inside the run loop's calls:
  GetContext (the context read: the full view or the log's tail), StreamGenerate (the
  whole model stream), ExecuteTool, AppendEntries, the
  run store's writes and reads, event publication; "other" is the rest of turn_ms
  (StartRun, rendering, decisions, scheduling);
- cpu_ms_per_turn (multi-process only): CPU time (user + system, from /proc) each process
  spent per turn while the runs were measured: the five services, the emulator and this
  process (the client); `sum` against `wall` says how much of a turn ran in parallel;
- emulator_connections (multi-process only): TCP connections the mesh opened to the
  emulator while the runs were measured (a pooled, kept-alive client opens one or none,
  not one per model call);
- timeline_ms_per_turn (both shapes): the same turn cut by its events' timestamps,
  which the runs service stamps itself, so it needs no instrumentation:
  turn_started→model_responded (GetContext + render + StreamGenerate),
  model_responded→tool_called (the log write of the response), tool_called→tool_returned
  (log write + ExecuteTool), tool_returned→items_persisted (session batch),
  items_persisted→next turn_started (the save point).

Usage: python tests/bench/bench_turn.py [OUT.json] [--mode in_process|multi_process|one_process|both]
[--runs N] [--db sqlite|postgres] (default bench-results/turn.json, both, 8 runs, SQLite).
`--db postgres` puts runs, sessions, tools and tasks of the multi-process mesh each on a
fresh PostgreSQL database at 127.0.0.1:5432 (created before, dropped after; the gateway's
journal stays on its SQLite file), as bench_peers.py's agentrt_postgres does.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import openai

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from agentrt.client.events import events_of  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply  # noqa: E402

TURNS = 10
RUNS = 8
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def _sdk_round_trip(emu: ProviderEmulator, n: int = 200) -> list[float]:
    client = openai.AsyncOpenAI(base_url=emu.base_url + "/v1", api_key="bench")
    emu.script([Reply(text="ok") for _ in range(n + 5)])
    samples = []
    for _ in range(n + 5):
        start = time.perf_counter()
        await client.responses.create(model="gpt-test", input="hi")
        samples.append((time.perf_counter() - start) * 1000)
    await client.close()
    return samples[5:]


def _script() -> list[Reply]:
    call = ToolCallReply("read_file", '{"path": "notes.txt"}')
    return [*(Reply(tool_calls=[call]) for _ in range(TURNS)), Reply(text="done")]


def _agent() -> pb.AgentSpec:
    from agentrt.v1 import common_pb2 as cpb

    return pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="read_file")],
        limits=pb.AgentLimits(max_turns=TURNS + 1),
    )


async def _read_stream(runs: Any, run_id: str) -> list[pb.RunEvent]:
    out: list[pb.RunEvent] = []

    async def read() -> None:
        async for msg in runs.StreamRunEvents(pb.StreamRunEventsRequest(run_id=run_id, batch_events=True)):
            out.extend(events_of(msg))

    await asyncio.wait_for(read(), 60)
    return out


async def _runs(
    runs: Any, work: pathlib.Path, script: Callable[[list[Reply]], Awaitable[None]]
) -> tuple[list[float], list[list[pb.RunEvent]]]:
    """Drive RUNS runs one after another; return (ms per turn of each run, their events)."""
    per_turn: list[float] = []
    streams: list[list[pb.RunEvent]] = []
    for i in range(RUNS):
        await script(_script())
        start_t = time.perf_counter()
        started = await runs.StartRun(
            pb.StartRunRequest(agent=_agent(), input=f"bench {i}", workspace=str(work))
        )
        events = await _read_stream(runs, started.run_id)
        elapsed = (time.perf_counter() - start_t) * 1000
        done = [e for e in events if e.WhichOneof("payload") == "run_completed"]
        if not done or done[0].run_completed.status != 3:
            raise RuntimeError(f"bench run did not complete: {done}")
        per_turn.append(elapsed / (TURNS + 1))
        streams.append(events)
    return per_turn, streams


_CUTS = (
    ("turn_started", "model_responded", "model: GetContext + render + StreamGenerate"),
    ("model_responded", "tool_called", "log write of the response"),
    ("tool_called", "tool_returned", "log write + ExecuteTool"),
    ("tool_returned", "items_persisted", "session batch (AppendEntries)"),
    ("items_persisted", "turn_started", "save point until the next turn starts"),
)


def _timeline(streams: list[list[pb.RunEvent]]) -> dict[str, float]:
    """Mean ms per tool turn between consecutive landmark events (see the module docstring)."""
    spans: dict[str, list[float]] = collections.defaultdict(list)
    for events in streams:
        marks: list[tuple[str, float]] = [
            (e.WhichOneof("payload"), e.time.ToNanoseconds() / 1e6) for e in events
        ]
        for a, b, label in _CUTS:
            for i, (kind, t) in enumerate(marks):
                if kind != a:
                    continue
                nxt = next(((k, u) for k, u in marks[i + 1 :] if k == b), None)
                if nxt is not None:
                    spans[f"{a}->{b} ({label})"].append(nxt[1] - t)
    return {k: round(statistics.mean(v), 2) for k, v in spans.items()}


# -- in-process ------------------------------------------------------------------------------


class _Phases:
    """Wall time inside the run loop's calls, by phase (in-process only: patches classes)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def _add(self, name: str, start: float) -> None:
        self.ms[name] += (time.perf_counter() - start) * 1000
        self.calls[name] += 1

    def wrap_async(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)

        async def timed(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return await original(*args, **kw)
            finally:
                self._add(name, start)

        setattr(owner, attr, timed)

    def wrap_sync(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)

        def timed(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kw)
            finally:
                self._add(name, start)

        setattr(owner, attr, timed)

    def install(self) -> None:
        from agentrt.runs.events.channel import RunChannel
        from agentrt.runs.events.hub import EventHub
        from agentrt.runs.loop import executor as loop
        from agentrt.runs.loop.phases import model as turn
        from agentrt.runs.peers.client import Peers
        from agentrt.runs.storage.store import RunStore

        self.wrap_async(Peers, "context", "GetContext")
        self.wrap_async(Peers, "tail", "GetContext")
        self.wrap_async(turn, "stream_model", "StreamGenerate")
        self.wrap_async(Peers, "execute", "ExecuteTool")
        self.wrap_async(Peers, "append", "AppendEntries")
        self.wrap_async(RunStore, "save", "run_db_writes")
        self.wrap_async(RunStore, "get_run", "run_db_reads")
        self.wrap_async(RunStore, "pending_input", "run_db_reads")
        self.wrap_async(RunStore, "read_log", "run_db_reads")
        self.wrap_sync(RunChannel, "publish", "event_publication")
        self.wrap_sync(EventHub, "deliver", "event_publication")
        assert loop.turnmod is turn

    def per_turn(self, turns: int, turn_ms: float) -> dict[str, Any]:
        out = {k: round(v / turns, 2) for k, v in sorted(self.ms.items())}
        out["other"] = round(turn_ms - sum(out.values()), 2)
        out["calls_per_turn"] = {k: round(v / turns, 2) for k, v in sorted(self.calls.items())}
        return out


async def in_process(emu: ProviderEmulator) -> dict[str, Any]:
    """Run the benchmark with every server in this process."""
    from agentrt.mesh.server import MeshServer
    from tests.service.runs.harness import start_mesh

    phases = _Phases()
    phases.install()
    servers: list[MeshServer] = []

    async def start(server: MeshServer) -> str:
        port = await server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        mesh = await start_mesh(start, tmp, emu)
        work = tmp / "work"
        (work / "notes.txt").write_text("hello\n")

        async def script(replies: list[Reply]) -> None:
            emu.script(replies)

        per_turn, streams = await _runs(mesh.runs, work, script)
    finally:
        for server in reversed(servers):
            await server.stop(grace=0)
    mean = statistics.mean(per_turn)
    return {
        "turn_ms": {"p50": _pct(per_turn, 0.5), "mean": round(mean, 2)},
        "phases_ms_per_turn": phases.per_turn(RUNS * (TURNS + 1), mean),
        "timeline_ms_per_turn": _timeline(streams),
    }


# -- multi-process ---------------------------------------------------------------------------


def _wait_http(url: str, proc: subprocess.Popen[bytes], bound_s: float = 30.0) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1.0).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("emulator did not answer")


def _post_script(base_url: str, replies: list[Reply]) -> None:
    body = [
        {"text": r.text, "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in r.tool_calls]}
        for r in replies
    ]
    req = urllib.request.Request(
        base_url + "/_emulator/script",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()


async def multi_process(db: str = "sqlite", one_process: bool = False) -> dict[str, Any]:
    """Run the benchmark against the mesh as five processes (or `serve all`'s one) and the emulator."""
    from agentrt.cli.ports import free_ports
    from agentrt.cli.serve import SERVICES
    from agentrt.cli.up import start_mesh
    from agentrt.client.channels import MeshClient

    tmp = pathlib.Path(tempfile.mkdtemp())
    emu_port, *ports = free_ports(1 + len(SERVICES))
    emu_url = f"http://127.0.0.1:{emu_port}"
    emu_proc = subprocess.Popen(
        [sys.executable, "-m", "tests.emulators.providers", "--port", str(emu_port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'services'}"},
    )
    mesh = None
    client = MeshClient()
    pg_names: list[str] = []
    try:
        _wait_http(emu_url + "/_emulator/requests", emu_proc)
        work = tmp / "work"
        work.mkdir()
        (work / "notes.txt").write_text("hello\n")
        env = {
            "AGENTRT_OPENAI_BASE_URL": emu_url + "/v1",
            "AGENTRT_OPENAI_API_KEY": "bench",
            "AGENTRT_DEFAULT_MODEL": "openai:gpt-test",
            "AGENTRT_LOG_LEVEL": "WARNING",
        }
        if db == "postgres":
            from tests.bench.bench_peers import DB_SERVICES, PG_HOST, create_databases

            tag = uuid.uuid4().hex[:10]
            pg_names = [f"agentrt_bench_turn_{svc}_{tag}" for svc in DB_SERVICES]
            await asyncio.to_thread(create_databases, pg_names)
            for svc, name in zip(DB_SERVICES, pg_names, strict=True):
                env[f"AGENTRT_{svc.upper()}_DB"] = f"postgresql+asyncpg://postgres@{PG_HOST}/{name}"
        mesh = await asyncio.to_thread(
            start_mesh,
            tmp / "state",
            ports=dict(zip(SERVICES, ports, strict=True)),
            env=env,
            one_process=one_process,
        )
        client = MeshClient(runs=mesh.addresses["runs"])

        async def script(replies: list[Reply]) -> None:
            await asyncio.to_thread(_post_script, emu_url, replies)

        pids = {"all": mesh.pids["runs"]} if one_process else mesh.pids
        procs = {**pids, "emulator": emu_proc.pid}
        cpu0, conns0, wall0 = _cpu_s(procs), _connections(emu_url), time.perf_counter()
        per_turn, streams = await _runs(client.run_service, work, script)
        cpu1, conns1, wall1 = _cpu_s(procs), _connections(emu_url), time.perf_counter()
    finally:
        await client.close()
        if mesh is not None:
            await asyncio.to_thread(mesh.stop)
        emu_proc.terminate()
        emu_proc.wait(10)
        if pg_names:
            from tests.bench.bench_peers import drop_databases

            await asyncio.to_thread(drop_databases, pg_names)
    turns = RUNS * (TURNS + 1)
    cpu = {name: round((cpu1[name] - cpu0[name]) * 1000 / turns, 2) for name in cpu0}
    cpu["sum"] = round(sum(cpu.values()), 2)
    cpu["wall"] = round((wall1 - wall0) * 1000 / turns, 2)
    return {
        "turn_ms": {"p50": _pct(per_turn, 0.5), "mean": round(statistics.mean(per_turn), 2)},
        "timeline_ms_per_turn": _timeline(streams),
        "cpu_ms_per_turn": cpu,
        # What the emulator accepted, less this process's own: one per run posting its
        # script, one reading the count at the end.
        "emulator_connections": conns1 - conns0 - RUNS - 1,
        "model_calls": turns,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _cpu_s(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) of each process so far, and of this one ("bench")."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / tick
    mine = os.times()
    out["bench"] = mine.user + mine.system
    return out


def _connections(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/_emulator/intake", timeout=10) as resp:
        return int(json.loads(resp.read())["connections"])


async def main(
    out: pathlib.Path, modes: tuple[str, ...] = ("in_process", "multi_process"), db: str = "sqlite"
) -> dict:
    """Measure the requested shapes and write the figures to `out` (JSON)."""
    emu = ProviderEmulator()
    try:
        sdk = await _sdk_round_trip(emu)
        result: dict[str, Any] = {
            "what": f"one turn through the mesh (real gRPC, {db}) with an instant model",
            "turns_per_run": TURNS + 1,
            "runs": RUNS,
            "sdk_round_trip_ms": {"p50": _pct(sdk, 0.5), "p99": _pct(sdk, 0.99)},
        }
        if "in_process" in modes:
            result["in_process"] = await in_process(emu)
    finally:
        emu.close()
    if "multi_process" in modes:
        result["multi_process"] = await multi_process(db)
    if "one_process" in modes:
        result["one_process"] = await multi_process(db, one_process=True)
    for mode in modes:
        result[mode]["overhead_ms_p50"] = round(
            result[mode]["turn_ms"]["p50"] - result["sdk_round_trip_ms"]["p50"], 2
        )
    result["cpus"] = os.cpu_count()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "turn.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    parser.add_argument(
        "--mode", choices=("in_process", "multi_process", "one_process", "both"), default="both"
    )
    parser.add_argument("--runs", type=int, default=RUNS, help=f"measured runs per shape (default {RUNS})")
    parser.add_argument(
        "--db", choices=("sqlite", "postgres"), default="sqlite", help="the multi-process mesh's databases"
    )
    args = parser.parse_args()
    RUNS = args.runs
    chosen = ("in_process", "multi_process") if args.mode == "both" else (args.mode,)
    print(json.dumps(asyncio.run(main(args.out, chosen, args.db)), indent=2))
