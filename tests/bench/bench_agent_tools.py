"""Agent-tool benchmark: what a child run costs a parent's tool call (004 §2.8).

Figures are written to a file, never asserted (`make bench`). The four production servers run
in this process (SQLite, real gRPC loopback channels) against the wire emulator. RUNS runs of
each shape, one after the other:
- plain: the parent calls list_files, then answers;
- child: the parent calls an agent tool whose child answers at once (one model call), then
  the parent answers.

Figures per shape: call_ms, the parent's tool_called to its tool_returned (the events' own
timestamps): for the child shape that is the whole child run (insert, hidden session, link,
spawn, one model call, its save points, the result); run_ms, StartRun to the stream's end
(seen by the client). child_call_minus_plain_call_ms: the mean difference of call_ms, which
includes the child's one model call through the gateway to the emulator (loopback HTTP).

Usage: python tests/bench/bench_agent_tools.py [OUT.json] (default bench-results/agent_tools.json).
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

RUNS = 20
MODEL = cpb.ModelRef(provider="openai", model="gpt-test")


def responder(path: str, body: Any) -> Reply:
    """Plays both agents: the helper answers at once; the parent calls its tool, then answers."""
    text = json.dumps(body)
    if "You are the helper." in text:
        return Reply(text="helped")
    if "function_call_output" in text:
        return Reply(text="done")
    if "shape:child" in text:
        return Reply(tool_calls=[ToolCallReply("ask_helper", '{"input": "help"}')])
    return Reply(tool_calls=[ToolCallReply("list_files", "{}")])


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
    emu.responder = responder
    tmp = pathlib.Path(tempfile.mkdtemp())
    figures: dict[str, dict[str, list[float]]] = {
        "plain": {"call_ms": [], "run_ms": []},
        "child": {"call_ms": [], "run_ms": []},
    }
    try:
        mesh = await start_mesh(start, tmp, emu)
        helper = pb.AgentSpec(name="helper", instructions="You are the helper.", model=MODEL, tools=[])
        boss = pb.AgentSpec(
            name="boss",
            model=MODEL,
            tools=[pb.AgentTool(name="ask_helper", agent_name="helper"), pb.AgentTool(name="list_files")],
        )
        for spec in (helper, boss):
            await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=spec))
        for i in range(RUNS * 2):
            shape = "child" if i % 2 else "plain"
            t0 = time.monotonic()
            started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input=f"shape:{shape}"))
            events = []
            request = pb.StreamRunEventsRequest(run_id=started.run_id, batch_events=True)
            async for msg in mesh.runs.StreamRunEvents(request):
                events.extend(events_of(msg))
            run_ms = (time.monotonic() - t0) * 1000
            done = [e.run_completed for e in events if e.WhichOneof("payload") == "run_completed"]
            if not done or done[0].status != cpb.RUN_STATUS_COMPLETED:
                raise RuntimeError(f"the run did not complete: {done}")
            called = next(e for e in events if e.WhichOneof("payload") == "tool_called")
            returned = next(e for e in events if e.WhichOneof("payload") == "tool_returned")
            call_ms = (returned.time.ToNanoseconds() - called.time.ToNanoseconds()) / 1e6
            figures[shape]["call_ms"].append(call_ms)
            figures[shape]["run_ms"].append(run_ms)
    finally:
        for server in reversed(servers):
            await server.stop(grace=0)
        emu.close()

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "mean": round(statistics.mean(values), 2),
            "p50": round(ordered[len(ordered) // 2], 2),
            "max": round(ordered[-1], 2),
        }

    out: dict[str, Any] = {
        "what": f"{RUNS} runs per shape, in-process, SQLite: a list_files call vs an agent-tool call",
        "runs_per_shape": RUNS,
        "cpus": os.cpu_count(),
    }
    for shape, values in figures.items():
        out[shape] = {name: summary(v) for name, v in values.items()}
    out["child_call_minus_plain_call_ms"] = round(
        statistics.mean(figures["child"]["call_ms"]) - statistics.mean(figures["plain"]["call_ms"]), 2
    )
    return out


def main(out: pathlib.Path) -> dict[str, Any]:
    """Measure and write the figures to `out` (JSON)."""
    result = asyncio.run(measure())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "agent_tools.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=pathlib.Path, default=default)
    print(json.dumps(main(parser.parse_args().out), indent=2))
