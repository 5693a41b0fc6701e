"""Session store benchmark (issue 3): figures written to a file, never asserted.

Measures through the production server and a real gRPC channel, on SQLite and (when
reachable) PostgreSQL:
- append latency p50/p99 of one entry and of a 20-entry turn (milliseconds);
- GetContext latency for sessions of 1,000 and 10,000 entries (milliseconds);
- 8 concurrent writers x 200 appends on one session: wall time and appends per second.

Usage: python tests/bench/bench_sessions.py [OUT.json]
(default $AGENTRT_BENCH_DIR/sessions.json, else bench-results/sessions.json)
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import tempfile
import time
import uuid

import asyncpg

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.storage.db import sqlite_url
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.stores import PG_DSN, PG_URL

PG = PG_URL


def _entry(i: int) -> pb.Entry:
    text = cpb.ContentBlock(text=cpb.TextBlock(text=f"message {i} " + "x" * 200))
    return pb.Entry(kind="item", item=pb.Item(message=cpb.Message(role=cpb.ROLE_USER, content=[text])))


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def _timed(coro) -> float:
    start = time.perf_counter()
    await coro
    return (time.perf_counter() - start) * 1000


async def _bench(url: str) -> dict:
    server = build_server(SessionsConfig(server=ServerConfig(port=0, db_url=url)))
    port = await server.start()
    channel = open_channel(f"127.0.0.1:{port}", tenant="bench-" + uuid.uuid4().hex[:12])
    stub = pb_grpc.SessionServiceStub(channel)
    out: dict = {}
    try:

        async def session() -> pb.SessionRef:
            created = await stub.CreateSession(pb.CreateSessionRequest())
            return pb.SessionRef(session_id=created.session.session_id)

        for name, size, rounds in (("append_1", 1, 300), ("append_20", 20, 100)):
            ref = await session()
            samples = [
                await _timed(
                    stub.AppendEntries(
                        pb.AppendEntriesRequest(session=ref, entries=[_entry(i) for i in range(size)])
                    )
                )
                for _ in range(rounds)
            ]
            out[name] = {"p50_ms": _pct(samples, 0.5), "p99_ms": _pct(samples, 0.99), "n": rounds}
        for size in (1000, 10_000):
            ref = await session()
            for start in range(0, size, 1000):
                batch = [_entry(i) for i in range(start, start + 1000)]
                await stub.AppendEntries(pb.AppendEntriesRequest(session=ref, entries=batch))
            samples = [await _timed(stub.GetContext(pb.GetContextRequest(session=ref))) for _ in range(10)]
            out[f"context_{size}"] = {"p50_ms": _pct(samples, 0.5), "max_ms": round(max(samples), 3), "n": 10}
        ref = await session()

        async def writer(w: int) -> None:
            for i in range(200):
                await stub.AppendEntries(pb.AppendEntriesRequest(session=ref, entries=[_entry(w * 1000 + i)]))

        start = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(8)))
        wall = time.perf_counter() - start
        log = await stub.ListEntries(pb.ListEntriesRequest(session=ref))
        out["writers_8x200"] = {
            "wall_s": round(wall, 3),
            "appends_per_s": round(1600 / wall, 1),
            "distinct_seqs": len({e.seq for e in log.entries}),
        }
    finally:
        await channel.close()
        await server.stop(grace=0)
    return out


async def _pg_up() -> bool:
    try:
        conn = await asyncio.wait_for(asyncpg.connect(PG_DSN), 5)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


async def main(path: pathlib.Path) -> dict:
    """Run every figure on both backends and write them to path as JSON."""
    results = {"sqlite": await _bench(sqlite_url(tempfile.mkdtemp(), "bench"))}
    results["postgres"] = await _bench(PG) if await _pg_up() else "skipped: PostgreSQL not reachable"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "sessions.json"
    target = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default
    print(json.dumps(asyncio.run(main(target)), indent=2))
