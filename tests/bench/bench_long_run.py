"""Long-run benchmark: a 200-turn run's per-turn cost stays flat once compaction holds the context.

Figures are written to a file, never asserted (`make bench`). The four production servers
run in this process (SQLite, real gRPC loopback channels) against the wire emulator; the
agent reads a file every turn for 200 turns, then answers, with a compaction policy
(turn trigger: more than 12 turn groups; keep the last 4). A responder plays the model: a
summary request gets a short summary, every other request the next tool call.

Figures, per block of 20 turns (turn_started to the next turn_started, from the events' own
timestamps):
- turn_ms: mean wall time of a turn;
- request_tokens: mean counted input of the model requests (the emulator's count, a quarter
  of the request's input bytes): what the model reads each turn;
- compactions: checkpoints written in the run;
- flatness: the last block's turn_ms over the first block after the first compaction (near
  1.0 when the per-turn cost does not grow with the log).

Usage: python tests/bench/bench_long_run.py [OUT.json] (default bench-results/long_run.json).
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
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from agentrt.client.events import events_of  # noqa: E402
from agentrt.core.compaction import SUMMARY_INSTRUCTIONS  # noqa: E402
from agentrt.v1 import common_pb2 as cpb  # noqa: E402
from agentrt.v1 import run_service_pb2 as pb  # noqa: E402
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply, count_input_tokens  # noqa: E402

TURNS = 200
BLOCK = 20


class Model:
    """The responder: TURNS tool turns, then an answer; summaries for summary requests."""

    def __init__(self) -> None:
        self.step = 0
        self.summaries = 0
        self.tokens: list[int] = []

    def __call__(self, path: str, body: Any) -> Reply:
        tokens = count_input_tokens(path, body)
        if SUMMARY_INSTRUCTIONS[:40] in json.dumps(body):
            self.summaries += 1
            return Reply(text=f"Summary {self.summaries}: the notes were read again.", input_tokens=tokens)
        self.tokens.append(tokens)
        self.step += 1
        if self.step > TURNS:
            return Reply(text="done", input_tokens=tokens)
        return Reply(tool_calls=[ToolCallReply("read_file", '{"path": "notes.txt"}')], input_tokens=tokens)


async def measure() -> dict[str, Any]:
    """Run the benchmark once; return its figures."""
    from agentrt.mesh.server import MeshServer
    from tests.service.runs.harness import start_mesh

    servers: list[MeshServer] = []

    async def start(server: MeshServer) -> str:
        port = await server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    emu = ProviderEmulator()
    model = Model()
    emu.responder = model
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        mesh = await start_mesh(start, tmp, emu)
        work = tmp / "work"
        (work / "notes.txt").write_text("The figures for the quarter are in the archive. " * 20)
        agent = pb.AgentSpec(
            model=cpb.ModelRef(provider="openai", model="gpt-test"),
            tools=[pb.AgentTool(name="read_file")],
            limits=pb.AgentLimits(max_turns=TURNS + 1),
            compaction=pb.CompactionPolicy(trigger_turns=12, keep_turns=4, summary_max_output_tokens=128),
        )
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent, input="read", workspace=str(work)))
        events = []
        request = pb.StreamRunEventsRequest(run_id=started.run_id, batch_events=True)
        async for msg in mesh.runs.StreamRunEvents(request):
            events.extend(events_of(msg))
        done = [e.run_completed for e in events if e.WhichOneof("payload") == "run_completed"]
        if not done or done[0].status != cpb.RUN_STATUS_COMPLETED:
            raise RuntimeError(f"the run did not complete: {done}")
        entries = await mesh.entries(started.session_id)
    finally:
        for server in reversed(servers):
            await server.stop(grace=0)
        emu.close()
    starts = [e.time.ToNanoseconds() / 1e6 for e in events if e.WhichOneof("payload") == "turn_started"]
    turn_ms = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    blocks = []
    for i in range(0, len(turn_ms), BLOCK):
        chunk = turn_ms[i : i + BLOCK]
        tokens = model.tokens[i : i + BLOCK]
        blocks.append(
            {
                "turns": f"{i + 1}-{i + len(chunk)}",
                "turn_ms": round(statistics.mean(chunk), 2),
                "request_tokens": round(statistics.mean(tokens)) if tokens else 0,
            }
        )
    checkpoints = sum(1 for e in entries if e.kind == "compaction")
    return {
        "what": f"a {TURNS}-turn run with compaction (trigger 12 turn groups, keep 4), in-process, SQLite",
        "turns": len(starts),
        "compactions": checkpoints,
        "session_entries": len(entries),
        "blocks": blocks,
        "flatness": round(blocks[-1]["turn_ms"] / blocks[1]["turn_ms"], 2) if len(blocks) > 2 else None,
        "request_tokens_first_last": [blocks[0]["request_tokens"], blocks[-1]["request_tokens"]],
        "cpus": os.cpu_count(),
    }


def main(out: pathlib.Path) -> dict[str, Any]:
    """Measure and write the figures to `out` (JSON)."""
    result = asyncio.run(measure())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "long_run.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    print(json.dumps(main(parser.parse_args().out), indent=2))
