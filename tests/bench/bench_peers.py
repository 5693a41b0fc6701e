"""Side by side: one model call through agentrt's mesh against the in-process frameworks (issue 15).

Figures are written to a file and printed as a table, never asserted (`make bench-peers`,
part of `make bench`). One wire emulator (`python -m tests.emulators.providers`, its own
process, answering at once) serves every contender; the run shape is bench_turn.py's:
runs of TURNS `read_file` tool calls then a final answer (TURNS + 1 model calls), each
run's wall time divided by its model calls (the bare SDK: one call), RUNS measured runs after
WARMUP discarded ones, in ROUNDS rounds (the contenders' order reversed each round, every
agentrt mesh and peer process started afresh each round), the samples pooled.

Contenders:
- agentrt_sqlite: the five services as processes (`agentrt.cli.up.start_mesh`, as
  bench_turn.py's multi_process), each on its SQLite file (the embedded default); this
  process starts runs and reads their event streams until run_completed;
- agentrt_postgres: the same mesh with every service that keeps tables (runs, sessions,
  tools, tasks, and the gateway's model-call journal) on a fresh PostgreSQL database at
  127.0.0.1:5432 (created here, dropped after); until round 14 of issue 15 the gateway's
  journal stayed on its SQLite file here, which flattered these contenders;
- agentrt_one_process_sqlite, agentrt_one_process_postgres: the same five services, databases
  and ports as one process (`agentrt serve all`, `start_mesh(one_process=True)`): the run loop
  calls its gateway, tool service and session store without the wire (decision 0056);
- the peers, each run by tests/bench/peers/peer_run.py as a subprocess of the peer venv
  (PEER_PYTHON, default .bench-venv/bin/python; `make bench-peers` builds it from
  tests/bench/peers/requirements.txt): langgraph_memory, langgraph_sqlite,
  langgraph_postgres (its own fresh database), openai_agents, openai_sdk (see peer_run.py).

Output (JSON, default bench-results/peers.json): per contender model_call_ms {p50, p90,
mean} over the pooled samples, p50_by_round, the emulator endpoints it called; ratios (p50
and p90 of each agentrt shape on SQLite / langgraph_memory and on PostgreSQL /
langgraph_postgres, pooled, and the p50 ratio within each round with its median; the issue's
bar is <= 1.0); the peers' versions; cpus; the load averages before and after.
Throughput (runs per minute at 1/2/3 runs replicas, 64 concurrent runs, and the CPU per turn
at 64 against one run at a time) is tests/bench/test_bench_scale_out.py's, in the same
`make bench` (bench-results/scale_out.json).

Usage: python tests/bench/bench_peers.py [OUT.json] [--runs N] [--rounds N] [--only NAME ...]
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
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from agentrt.client.events import events_of  # noqa: E402
from agentrt.v1 import common_pb2 as cpb  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TURNS = 10
RUNS = 15
WARMUP = 5
#: Every contender is measured once per round, the order reversed each round, and its
#: samples pooled: a machine whose load drifts (shared cores) weighs on all of them alike.
ROUNDS = 2
PG_HOST = "127.0.0.1:5432"
PG_ADMIN = f"postgresql://postgres@{PG_HOST}/postgres"
#: The services that keep tables: on PostgreSQL every one of them, the gateway's model-call
#: journal (AGENTRT_GATEWAY_DB) too, as a deployment whose gateways share it has it (its
#: limiter stays in memory: the bench sets no budget).
DB_SERVICES = ("runs", "sessions", "tools", "tasks", "gateway")
AGENTRT = ("agentrt_sqlite", "agentrt_postgres", "agentrt_one_process_sqlite", "agentrt_one_process_postgres")
PEERS = ("langgraph_memory", "langgraph_sqlite", "langgraph_postgres", "openai_agents", "openai_sdk")
RATIOS = (
    ("agentrt_sqlite", "langgraph_memory"),
    ("agentrt_postgres", "langgraph_postgres"),
    ("agentrt_one_process_sqlite", "langgraph_memory"),
    ("agentrt_one_process_postgres", "langgraph_postgres"),
)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _figures(samples: list[float]) -> dict[str, float]:
    return {"p50": _pct(samples, 0.5), "p90": _pct(samples, 0.9), "mean": round(statistics.mean(samples), 2)}


# -- the emulator ----------------------------------------------------------------------------


class Emulator:
    """The wire emulator as its own process (stdout's first line names its URL)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.emulators.providers", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("provider emulator listening on "):
            self.close()
            raise RuntimeError(f"the emulator did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[1].strip()
        self._seen = 0

    def script(self, turns: int) -> None:
        """Queue one run's replies: `turns` read_file calls, then a final answer."""
        call = {"name": "read_file", "arguments": '{"path": "notes.txt"}'}
        body = [{"text": "", "tool_calls": [call]} for _ in range(turns)] + [{"text": "done"}]
        req = urllib.request.Request(
            self.url + "/_emulator/script",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10).read()

    def endpoints_since_last(self) -> dict[str, int]:
        """Count the model requests received since the last call, by path."""
        with urllib.request.urlopen(self.url + "/_emulator/requests", timeout=30) as resp:
            seen = json.loads(resp.read())
        new, self._seen = seen[self._seen :], len(seen)
        return dict(collections.Counter(r["path"] for r in new))

    def close(self) -> None:
        """Stop the emulator process."""
        self.proc.terminate()
        self.proc.wait(10)


# -- PostgreSQL ------------------------------------------------------------------------------


async def _admin(statements: list[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN)
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


def create_databases(names: list[str]) -> None:
    """Create empty PostgreSQL databases on 127.0.0.1:5432."""
    asyncio.run(_admin([f'CREATE DATABASE "{n}"' for n in names]))


def drop_databases(names: list[str]) -> None:
    """Drop the databases (their connections closed first)."""
    asyncio.run(_admin([f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)' for n in names]))


# -- agentrt ---------------------------------------------------------------------------------


async def _agentrt_runs(runs_addr: str, emu: Emulator, work: pathlib.Path, n: int) -> list[float]:
    from agentrt.client.channels import MeshClient

    client = MeshClient(runs=runs_addr)
    # The agent offers read_file, as bench_turn.py's does: a call of a tool the agent does not
    # list is answered "not found" and three such turns fail the run (tool_loop).
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="read_file")],
        limits=pb.AgentLimits(max_turns=TURNS + 1),
    )
    samples: list[float] = []
    try:
        for i in range(WARMUP + n):
            await asyncio.to_thread(emu.script, TURNS)
            start = time.perf_counter()
            started = await client.run_service.StartRun(
                pb.StartRunRequest(agent=agent, input=f"bench {i}", workspace=str(work))
            )
            status = None
            request = pb.StreamRunEventsRequest(run_id=started.run_id, batch_events=True)
            async for msg in client.run_service.StreamRunEvents(request):
                for event in events_of(msg):
                    if event.WhichOneof("payload") == "run_completed":
                        status = event.run_completed.status
            if status != 3:
                raise RuntimeError(f"agentrt run {i} did not complete (status {status})")
            if i >= WARMUP:
                samples.append((time.perf_counter() - start) * 1000 / (TURNS + 1))
    finally:
        await client.close()
    return samples


def agentrt(name: str, emu: Emulator, tmp: pathlib.Path, n: int) -> dict[str, Any]:
    """Measure the mesh (five processes, or `serve all`'s one), on SQLite or fresh PostgreSQL databases."""
    from agentrt.cli.ports import free_ports
    from agentrt.cli.serve import SERVICES
    from agentrt.cli.up import start_mesh

    env = {
        "AGENTRT_OPENAI_BASE_URL": emu.url + "/v1",
        "AGENTRT_OPENAI_API_KEY": "bench",
        "AGENTRT_DEFAULT_MODEL": "openai:gpt-test",
        "AGENTRT_LOG_LEVEL": "WARNING",
    }
    names: list[str] = []
    if name.endswith("_postgres"):
        tag = uuid.uuid4().hex[:10]
        names = [f"agentrt_bench_peers_{svc}_{tag}" for svc in DB_SERVICES]
        create_databases(names)
        for svc, db in zip(DB_SERVICES, names, strict=True):
            env[f"AGENTRT_{svc.upper()}_DB"] = f"postgresql+asyncpg://postgres@{PG_HOST}/{db}"
    work = tmp / name / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("hello\n")
    mesh = None
    try:
        ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
        mesh = start_mesh(tmp / name / "state", ports=ports, env=env, one_process="one_process" in name)
        samples = asyncio.run(_agentrt_runs(mesh.addresses["runs"], emu, work, n))
    finally:
        if mesh is not None:
            mesh.stop()
        if names:
            drop_databases(names)
    return {"samples_ms": samples}


# -- the peers -------------------------------------------------------------------------------


def peer(name: str, emu: Emulator, tmp: pathlib.Path, n: int, python: str) -> dict[str, Any]:
    """Run one peer in the peer venv (peer_run.py) and return its figures."""
    work = tmp / name / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("hello\n")
    names: list[str] = []
    db = ""
    if name == "langgraph_sqlite":
        db = str(tmp / name / "checkpoints.db")
    elif name == "langgraph_postgres":
        names = [f"agentrt_bench_peers_langgraph_{uuid.uuid4().hex[:10]}"]
        create_databases(names)
        db = f"postgresql://postgres@{PG_HOST}/{names[0]}"
    args = [python, str(ROOT / "tests/bench/peers/peer_run.py"), name, "--base-url", emu.url]
    args += ["--work", str(work), "--db", db, "--runs", str(n)]
    args += ["--turns", str(TURNS), "--warmup", str(WARMUP)]
    # No tracing exporter of any peer may reach the network (LangSmith, the Agents SDK's).
    env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false"}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
    finally:
        if names:
            drop_databases(names)
    if done.returncode != 0:
        raise RuntimeError(f"peer {name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the report ------------------------------------------------------------------------------


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """agentrt / peer per model call (only for pairs both measured).

    p50 and p90 over the pooled samples; `p50_by_round`, the ratio of the two contenders'
    p50s within each round (measured minutes apart, so a drift of the machine's load weighs
    on both), and its median, `p50_median_of_rounds`: with several rounds the steadier figure.
    """
    out: dict[str, Any] = {}
    for ours, theirs in RATIOS:
        if ours in results and theirs in results:
            a, b = results[ours]["model_call_ms"], results[theirs]["model_call_ms"]
            pair: dict[str, Any] = {q: round(a[q] / b[q], 2) for q in ("p50", "p90")}
            by_round = [
                x / y
                for x, y in zip(results[ours]["p50_by_round"], results[theirs]["p50_by_round"], strict=True)
            ]
            pair["p50_by_round"] = [round(r, 2) for r in by_round]
            pair["p50_median_of_rounds"] = round(statistics.median(by_round), 2)
            out[f"{ours}/{theirs}"] = pair
    return out


def print_table(report: dict[str, Any]) -> None:
    """Print the per-model-call figures and the ratios with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ms per model call ({TURNS}-call runs + final answer, instant emulator)")
    for col in ("contender", "p50", "p90", "mean", "× langgraph_memory p50"):
        table.add_column(col, justify="left" if col == "contender" else "right")
    base = report["contenders"].get("langgraph_memory", {}).get("model_call_ms", {}).get("p50")
    for name, fig in report["contenders"].items():
        ms = fig["model_call_ms"]
        rel = f"{ms['p50'] / base:.2f}" if base else "-"
        table.add_row(name, f"{ms['p50']:.2f}", f"{ms['p90']:.2f}", f"{ms['mean']:.2f}", rel)
    console = Console()
    console.print(table)
    for pair, r in report["ratios"].items():
        rounds = ", ".join(f"{x:.2f}" for x in r["p50_by_round"])
        console.print(
            f"{pair}: p50 {r['p50']:.2f}×, p90 {r['p90']:.2f}×; by round {rounds}, "
            f"median {r['p50_median_of_rounds']:.2f}× (bar: ≤ 1.0×)"
        )


def main(out: pathlib.Path, only: tuple[str, ...], n: int, rounds: int, python: str) -> dict[str, Any]:
    """Measure the chosen contenders, `rounds` rounds of `n` runs each, and write the report."""
    if any(c in PEERS for c in only) and not pathlib.Path(python).exists():
        raise SystemExit(f"the peer venv's python {python} is missing: run `make bench-peers`")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-peers-"))
    load_before = os.getloadavg()
    emu = Emulator()
    samples: dict[str, list[float]] = {name: [] for name in only}
    round_p50: dict[str, list[float]] = {name: [] for name in only}
    endpoints: dict[str, collections.Counter[str]] = {name: collections.Counter() for name in only}
    versions: dict[str, str] = {}
    try:
        for r in range(rounds):
            for name in only if r % 2 == 0 else tuple(reversed(only)):
                print(f"round {r + 1}/{rounds}: {name} ...", file=sys.stderr, flush=True)
                where = tmp / f"round{r}"
                got = agentrt(name, emu, where, n) if name in AGENTRT else peer(name, emu, where, n, python)
                versions = versions or got.get("versions", {})
                samples[name] += got["samples_ms"]
                round_p50[name].append(_pct(got["samples_ms"], 0.5))
                endpoints[name].update(emu.endpoints_since_last())
    finally:
        emu.close()
    results = {
        name: {
            "model_call_ms": _figures(samples[name]),
            "p50_by_round": round_p50[name],
            "samples": len(samples[name]),
            "model_calls_per_sample": 1 if name == "openai_sdk" else TURNS + 1,
            "endpoints": dict(endpoints[name]),
        }
        for name in only
    }
    report = {
        "what": "ms per model call, side by side, one wire emulator answering at once (issue 15)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model_calls_per_run": TURNS + 1,
        "rounds": rounds,
        "runs_per_round": n,
        "warmup_runs_per_round": WARMUP,
        "contenders": results,
        "ratios": ratios(results),
        "peer_versions": versions,
        "throughput": "bench-results/scale_out.json (tests/bench/test_bench_scale_out.py, make bench): "
        "runs per minute at 1/2/3 runs replicas and the mesh's CPU per turn at 64 concurrent runs",
        "cpus": os.cpu_count(),
        # the machine's 1/5/15-minute load averages before and after (other work shares it)
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "peers.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    parser.add_argument("--runs", type=int, default=RUNS, help="measured runs per contender and round")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds (the order reversed each)")
    parser.add_argument("--only", nargs="+", choices=AGENTRT + PEERS, default=AGENTRT + PEERS)
    venv_python = str(ROOT / ".bench-venv/bin/python")
    parser.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", venv_python))
    args = parser.parse_args()
    print_table(main(args.out, tuple(args.only), args.runs, args.rounds, args.peer_python))
