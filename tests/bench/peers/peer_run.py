"""One peer of the side-by-side bench, run in the peer venv (.bench-venv), printing JSON figures.

Run by tests/bench/bench_peers.py as a subprocess with the peer venv's interpreter; it
imports nothing of agentrt or of tests/ (the peer venv has neither), only the peers and
the stdlib. The run shape is bench_turn.py's: runs of TURNS calls of one cheap
`read_file` tool (it reads a small file from a work dir), then a final answer, so
TURNS + 1 model calls per run, against the wire emulator answering at once (scripted
over HTTP before each run).

Contenders:
- langgraph_memory: LangGraph's prebuilt ReAct agent (`create_react_agent`) over
  langchain-openai's ChatOpenAI, no checkpointer (state in memory only, nothing persisted);
- langgraph_sqlite / langgraph_postgres: the same agent with LangGraph's AsyncSqliteSaver /
  AsyncPostgresSaver (a fresh thread per run; `--db` is the SQLite file / libpq DSN);
- openai_agents: openai-agents-python's `Runner.run` (OpenAIResponsesModel, tracing off);
- openai_sdk: a bare `AsyncOpenAI().responses.create` per call (the floor; one call per
  "run", so `model_call_ms` is one round trip).

Output (stdout, one JSON object): contender, model_calls_per_run, runs, warmup_runs,
model_call_ms {p50, p90, mean} (wall time of a run divided by its model calls, ms),
samples_ms (every measured run's figure), versions {package: version}.

Usage: peer_run.py CONTENDER --base-url http://127.0.0.1:PORT --work DIR [--db X]
[--runs N] [--turns N] [--warmup N]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import pathlib
import statistics
import time
import urllib.request
import uuid
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

CONTENDERS = ("langgraph_memory", "langgraph_sqlite", "langgraph_postgres", "openai_agents", "openai_sdk")
VERSIONS = (
    "openai",
    "langgraph",
    "langgraph-prebuilt",
    "langchain-core",
    "langchain-openai",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "psycopg",
    "openai-agents",
)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _script(base_url: str, turns: int) -> None:
    """Queue one run's replies: `turns` read_file calls, then a final answer."""
    call = {"name": "read_file", "arguments": '{"path": "notes.txt"}'}
    body = [{"text": "", "tool_calls": [call]} for _ in range(turns)] + [{"text": "done"}]
    req = urllib.request.Request(
        base_url + "/_emulator/script",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()


def _reader(work: pathlib.Path) -> Callable[[str], str]:
    def read_file(path: str) -> str:
        """Read a text file of the workspace and return its content."""
        return (work / path).read_text()

    return read_file


async def _langgraph(args: argparse.Namespace) -> Callable[[int], Awaitable[None]]:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    model = ChatOpenAI(model="gpt-test", base_url=args.base_url + "/v1", api_key="bench", max_retries=0)
    saver: Any = None
    if args.contender == "langgraph_sqlite":
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        saver = AsyncSqliteSaver(await aiosqlite.connect(args.db))
        await saver.setup()
    elif args.contender == "langgraph_postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        # as AsyncPostgresSaver.from_conn_string connects
        conn = await AsyncConnection.connect(
            args.db, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
    agent = create_react_agent(model, [tool(_reader(args.work))], checkpointer=saver)

    async def run(i: int) -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 4 * args.turns + 10}
        out = await agent.ainvoke({"messages": [("user", f"bench {i}")]}, config)
        if out["messages"][-1].content != "done":
            raise RuntimeError(f"run {i} did not end with the final answer: {out['messages'][-1]!r}")

    return run


async def _openai_agents(args: argparse.Namespace) -> Callable[[int], Awaitable[None]]:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=args.base_url + "/v1", api_key="bench", max_retries=0)
    agent = Agent(
        name="bench",
        instructions="You are a benchmark agent.",
        tools=[function_tool(_reader(args.work))],
        model=OpenAIResponsesModel(model="gpt-test", openai_client=client),
    )

    async def run(i: int) -> None:
        result = await Runner.run(agent, f"bench {i}", max_turns=args.turns + 2)
        if result.final_output != "done":
            raise RuntimeError(f"run {i} did not end with the final answer: {result.final_output!r}")

    return run


async def _openai_sdk(args: argparse.Namespace) -> Callable[[int], Awaitable[None]]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=args.base_url + "/v1", api_key="bench", max_retries=0)

    async def run(i: int) -> None:
        await client.responses.create(model="gpt-test", input=f"bench {i}")

    return run


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Build the contender, drive warmup + measured runs, return the figures."""
    warnings.simplefilter("ignore")
    bare = args.contender == "openai_sdk"
    calls = 1 if bare else args.turns + 1
    if args.contender.startswith("langgraph"):
        run = await _langgraph(args)
    elif args.contender == "openai_agents":
        run = await _openai_agents(args)
    else:
        run = await _openai_sdk(args)
    runs = args.runs * (args.turns + 1) if bare else args.runs
    warmup = args.warmup * (args.turns + 1) if bare else args.warmup
    samples: list[float] = []
    for i in range(warmup + runs):
        await asyncio.to_thread(_script, args.base_url, 0 if bare else args.turns)
        start = time.perf_counter()
        await run(i)
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1000 / calls)
    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {
        "contender": args.contender,
        "model_calls_per_run": calls,
        "runs": runs,
        "warmup_runs": warmup,
        "model_call_ms": {
            "p50": _pct(samples, 0.5),
            "p90": _pct(samples, 0.9),
            "mean": round(statistics.mean(samples), 2),
        },
        "samples_ms": [round(x, 3) for x in samples],
        "versions": versions,
    }


def main() -> None:
    """Parse the arguments, measure, print the figures as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=CONTENDERS)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--work", type=pathlib.Path, required=True)
    parser.add_argument("--db", default="")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
