"""Guardrail benchmark: what pattern guardrails add to a turn, and how soon a racing tripwire stops a run.

Figures are written to a file, never asserted (`make bench`). The four production servers
run in this process (SQLite, real gRPC loopback channels) against the wire emulator.

- turn_ms: mean wall time of a turn (turn_started to the next, from the events' own
  timestamps), the median of REPEATS runs each way, of a TURNS-turn run that reads a file
  every turn, without guardrails and with four pattern guardrails (blocking input, output,
  tool_input, tool_output; none matches), and the difference per turn (each guarded turn
  consults two: tool_input and tool_output, each a save of its own).
- racing_trip_ms: StartRun to the run's failure when a racing model guardrail trips while
  the model call streams (the stream would take STREAM_S seconds): the tripwire ends it.
- judge_ms: the guardrail_result's own duration (the judge's Generate through the gateway).

Usage: python tests/bench/bench_guardrails.py [OUT.json] (default bench-results/guardrails.json).
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

from agentrt.client.events import events_of  # noqa: E402
from agentrt.v1 import common_pb2 as cpb  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply  # noqa: E402
from tests.service.runs.guards import BLOCKING, IN, OUT, TOOL_IN, TOOL_OUT, judge, judged_by, pattern, verdict  # noqa: E402

TURNS = 30
REPEATS = 5
STREAM_S = 5.0


def guarded() -> list[pb.Guardrail]:
    """Four pattern guardrails that never match, one per stage."""
    never = [r"\bnever-matches-\d+\b", r"(?i)forbidden phrase"]
    return [
        pattern("in", [IN], never, mode=BLOCKING),
        pattern("out", [OUT], never),
        pattern("tin", [TOOL_IN], never),
        pattern("tout", [TOOL_OUT], never),
    ]


async def _mesh(tmp: pathlib.Path, emu: ProviderEmulator, servers: list[Any]) -> Any:
    from tests.service.runs.harness import start_mesh

    async def start(server: Any) -> str:
        port = await server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    return await start_mesh(start, tmp, emu)


async def _events(mesh: Any, run_id: str) -> list[pb.RunEvent]:
    request = pb.StreamRunEventsRequest(run_id=run_id, batch_events=True)
    return [e async for m in mesh.runs.StreamRunEvents(request) for e in events_of(m)]


async def turn_cost(guardrails: list[pb.Guardrail]) -> float:
    """Mean turn time of a TURNS-turn run, in milliseconds."""
    emu, servers = ProviderEmulator(), []
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        mesh = await _mesh(tmp, emu, servers)
        (tmp / "work" / "notes.txt").write_text("The figures for the quarter are in the archive. " * 20)
        emu.script([Reply(tool_calls=[ToolCallReply("read_file", '{"path": "notes.txt"}')])] * TURNS)
        emu.script([Reply(text="done")])
        spec = pb.AgentSpec(
            model=cpb.ModelRef(provider="openai", model="gpt-test"),
            tools=[pb.AgentTool(name="read_file")],
            limits=pb.AgentLimits(max_turns=TURNS + 1),
            guardrails=guardrails,
        )
        started = await mesh.runs.StartRun(
            pb.StartRunRequest(agent=spec, input="read", workspace=str(tmp / "work"))
        )
        events = await _events(mesh, started.run_id)
    finally:
        for server in reversed(servers):
            await server.stop(grace=0)
        emu.close()
    done = [e.run_completed for e in events if e.WhichOneof("payload") == "run_completed"]
    if not done or done[0].status != cpb.RUN_STATUS_COMPLETED:
        raise RuntimeError(f"the run did not complete: {done}")
    starts = [e.time.ToNanoseconds() / 1e6 for e in events if e.WhichOneof("payload") == "turn_started"]
    return statistics.mean(b - a for a, b in zip(starts, starts[1:], strict=False))


async def racing_trip() -> tuple[float, float]:
    """(StartRun to failure, the judge's own duration), in milliseconds."""
    emu, servers = ProviderEmulator(), []
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        mesh = await _mesh(tmp, emu, servers)
        emu.responder = judged_by(lambda p, b: verdict("trip", "no"), after_model_call=True)
        chars = 4 * int(STREAM_S / 0.02)
        emu.script([Reply(text="x" * chars, chunk_chars=4, event_delay=0.02)])
        spec = pb.AgentSpec(
            model=cpb.ModelRef(provider="openai", model="gpt-test"), guardrails=[judge("j", [IN])]
        )
        t0 = time.monotonic()
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="hi"))
        events = await _events(mesh, started.run_id)
        elapsed = (time.monotonic() - t0) * 1000
    finally:
        for server in reversed(servers):
            await server.stop(grace=0)
        emu.close()
    (result,) = [e.guardrail_result for e in events if e.WhichOneof("payload") == "guardrail_result"]
    return elapsed, result.duration.ToNanoseconds() / 1e6


async def measure() -> dict[str, Any]:
    """Run the benchmark once; return its figures."""
    bares, guardeds = [], []
    for _ in range(REPEATS):  # interleaved, so a busy moment of the machine hits both
        bares.append(await turn_cost([]))
        guardeds.append(await turn_cost(guarded()))
    bare, with_guards = statistics.median(bares), statistics.median(guardeds)
    trip_ms, judge_ms = await racing_trip()
    what = f"{REPEATS} x a {TURNS}-turn read_file run each way (median), in-process, SQLite"
    return {
        "what": f"{what}; a racing judge tripping a {STREAM_S:g} s stream",
        "turn_ms_without_guardrails": round(bare, 2),
        "turn_ms_with_four_pattern_guardrails": round(with_guards, 2),
        "added_ms_per_turn": round(with_guards - bare, 2),
        "racing_trip_ms": round(trip_ms, 1),
        "judge_ms": round(judge_ms, 1),
        "stream_would_take_ms": STREAM_S * 1000,
        "cpus": os.cpu_count(),
    }


def main(out: pathlib.Path) -> dict[str, Any]:
    """Measure and write the figures to `out` (JSON)."""
    result = asyncio.run(measure())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "guardrails.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    print(json.dumps(main(parser.parse_args().out), indent=2))
