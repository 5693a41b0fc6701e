"""Run-store benchmark: what the run store's calls on a turn's path cost, alone (decision 0026).

Figures are written to a file, never asserted. A `RunStore` on a fresh database (a SQLite file
in a temporary directory, or a new PostgreSQL database at 127.0.0.1:5432, dropped after), on
uvloop, in this one process:

- insert_run: a new run with its two first events (StartRun's write), `--runs` / 10 of them;
- save: `--runs` save points of a tool turn's shape on one run (five changed columns, two log
  entries with a model response's payload, four events), fenced by the run's token;
- pending_input: the input-queue read that follows each save point;
- get_run, read_events: a new run's row and its two events (StreamRunEvents' replay);
- read_log: the run's whole log (2 × `--runs` + 1 entries; JSON decoding included).

Each figure is the median (and mean) over the calls after the first tenth, in microseconds of
CPU time of this thread (`time.thread_time`: on a shared machine the steadiest figure; the
database server's CPU is not in it), and for save its wall time too.

Usage: python tests/bench/bench_run_store.py [OUT.json] [--db sqlite|postgres] [--runs N]
(default bench-results/run_store.json, sqlite, 400).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from agentrt.mesh.storage.db import Database, sqlite_url  # noqa: E402
from agentrt.runs.domain import RunRecord, StoredEvent  # noqa: E402
from agentrt.runs.storage.store import RunStore  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"


def _record(run_id: str) -> RunRecord:
    now = time.time()
    return RunRecord(
        run_id=run_id, tenant="t", session_id=f"s-{run_id}", agent_name="a", agent_version=1,
        agent=pb.AgentSpec(name="a", instructions="x" * 300), input="go", lease_owner="me",
        lease_expires_s=now + 300, fencing_token=1, create_time_s=now, update_time_s=now,
    )  # fmt: skip


def _event(run_id: str, seq: int) -> StoredEvent:
    event = pb.RunEvent(seq=seq, run_id=run_id, diagnostic=pb.Diagnostic(code="c", message="m" * 150))
    return StoredEvent(run_id, seq, "t", f"s-{run_id}", seq, event)


async def measure(url: str, n: int) -> dict[str, dict[str, float]]:
    """Run the calls against the database at url; return {call: {median_us, mean_us}}."""
    db = Database(url)
    store = RunStore(db, replica="bench")
    await store.create_tables()
    samples: dict[str, list[float]] = {}

    def took(name: str, since: float, clock: Any = time.thread_time) -> None:
        samples.setdefault(name, []).append((clock() - since) * 1e6)

    runs = [f"run_{i:06d}" for i in range(max(1, n // 10))]
    for run_id in runs:
        t0 = time.thread_time()
        await store.insert_run(_record(run_id), [pb.RunEvent(), pb.RunEvent()])
        took("insert_run", t0)
    run_id, seq = runs[0], 2
    payload = {"turn": 1, "response": {"output": [{"type": "message", "text": "y" * 400}]}}
    for i in range(n):
        events = [_event(run_id, seq + k) for k in range(1, 5)]
        seq += 4
        changes = {"phase": 3, "turns": i, "event_seq_reserved": seq + 64, "session_seq_reserved": seq + 64}
        t0, w0 = time.thread_time(), time.perf_counter()
        saved = await store.save(
            run_id,
            changes={**changes, "session_last_seq": 3 * i},
            log=[("model_responded", payload), ("tools_started", {"turn": i, "calls": ["c1"]})],
            events=events,
            token=1,
        )
        took("save", t0)
        took("save (wall)", w0, time.perf_counter)
        assert saved is not None
        t0 = time.thread_time()
        await store.pending_input(run_id)
        took("pending_input", t0)
    for i in range(max(1, n // 4)):
        other = runs[i % len(runs)]
        t0 = time.thread_time()
        await store.get_run(other, "t")
        took("get_run", t0)
        t0 = time.thread_time()
        await store.read_events(other, 0)
        took("read_events (2)", t0)
    for _ in range(20):
        t0 = time.thread_time()
        await store.read_log(run_id)
        took(f"read_log ({2 * n + 1})", t0)
    await db.close()
    out = {}
    for name, values in samples.items():
        kept = values[len(values) // 10 :]
        out[name] = {"median_us": round(statistics.median(kept)), "mean_us": round(statistics.mean(kept))}
    return out


async def main(out: pathlib.Path, backend: str, n: int) -> dict[str, Any]:
    """Measure on one backend and write the figures to out."""
    import asyncpg

    name = ""
    if backend == "postgres":
        name = f"agentrt_bench_run_store_{uuid.uuid4().hex[:10]}"
        admin = await asyncpg.connect(PG_SERVER + "/postgres")
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.close()
        url = f"{PG_SERVER.replace('postgresql', 'postgresql+asyncpg')}/{name}"
    else:
        url = sqlite_url(tempfile.mkdtemp(), "runs")
    try:
        figures = await measure(url, n)
    finally:
        if name:
            admin = await asyncpg.connect(PG_SERVER + "/postgres")
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await admin.close()
    load = [round(x, 2) for x in os.getloadavg()]
    result = {"db": backend, "calls": n, "cpu_us": figures, "load_average": load}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    import uvloop

    default = pathlib.Path(__file__).resolve().parents[2] / "bench-results" / "run_store.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=400, help="save points measured (default 400)")
    args = parser.parse_args()
    print(json.dumps(uvloop.run(main(args.out, args.db, args.runs)), indent=2))
