"""Helpers of the one-process tests: `agentrt serve all` started, killed and started again.

`OneProcess` starts the five services as one process with `start_mesh(one_process=True)`
(the code `agentrt up --one-process` runs) on fixed ports, on SQLite in its state dir or on
fresh PostgreSQL databases of its own (created here, dropped by `close`), its gateway pointed
at the provider emulator; `kill` sends SIGKILL to that one process and reaps it, `start`
starts it again on the same ports and databases (the earlier log is kept as
`logs/all-<n>.log`). `Cells` is the emulator's responder: per cell named in a run's input, a
turn with one command that has a visible side effect, then a final answer.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from chaos_helpers import LEASE_SECONDS, create_databases, drop_databases
from e2e_helpers import STATE_TIMEOUT, emulator_env, free_port_map
from shared_meshes import run_async

from agentrt.cli.up import ChildExit, Mesh, start_mesh
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply
from tests.stores import PG_DATABASE, PG_HOST


class Cells:
    """The emulator's responder: the first request of a cell asks for one command, the next answers.

    The command appends `start-<cell>` to starts.txt, sleeps `sleep_s` seconds, appends
    `line-<cell>` to lines.txt and prints `ok-<cell>`: each file shows how many times it ran
    (started, finished). A cell in `slow` streams its reply in small chunks.
    """

    def __init__(self, sleep_s: float = 1.0) -> None:
        self.sleep_s = sleep_s
        self.slow: set[str] = set()

    def __call__(self, path: str, body: Any) -> Reply | None:
        text = json.dumps(body)
        cell = next((c for c in text.split("cell:")[1:2]), "").split("\\")[0].split('"')[0]
        if not cell:
            return None
        if "function_call_output" in text:
            return Reply(text=f"finished {cell}")
        cmd = (
            f"echo start-{cell} >> starts.txt; sleep {self.sleep_s}; "
            f"echo line-{cell} >> lines.txt; echo ok-{cell}"
        )
        reply = Reply(
            text=f"running {cell}", tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))]
        )
        if cell in self.slow:
            reply.chunk_chars, reply.event_delay = 2, 0.05
        return reply


@dataclass
class OneProcess:
    """The five services as one process, started again after each kill (module docstring)."""

    root: Path
    emu: ProviderEmulator
    env: dict[str, str]
    ports: dict[str, int] = field(default_factory=free_port_map)
    databases: list[str] = field(default_factory=list)
    mesh: Mesh | None = None
    starts: int = 0

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def runs(self) -> str:
        return f"127.0.0.1:{self.ports['runs']}"

    @property
    def sessions(self) -> str:
        return f"127.0.0.1:{self.ports['sessions']}"

    @property
    def tools(self) -> str:
        return f"127.0.0.1:{self.ports['tools']}"

    @property
    def pid(self) -> int:
        assert self.mesh is not None
        return self.mesh.pids["runs"]

    def start(self, extra: dict[str, str] | None = None) -> Mesh:
        """Start `serve all` on the ports and databases (of every earlier start); wait for SERVING."""
        assert self.mesh is None, "the process is still up"
        log = self.state / "logs" / "all.log"
        if log.exists():  # start_mesh rewrites it; keep the earlier process's for the reader
            log.rename(log.with_name(f"all-{self.starts}.log"))
        self.mesh = start_mesh(
            self.state, ports=self.ports, env={**self.env, **(extra or {})}, one_process=True
        )
        self.starts += 1
        return self.mesh

    def wait_exit(self) -> ChildExit:
        """Wait until the process ended on its own (a crash point); return how."""
        assert self.mesh is not None
        gone = self.mesh.wait_exit(STATE_TIMEOUT)
        assert gone is not None, "the process did not end"
        self.mesh.stop()  # closes the log; the process is gone already
        self.mesh = None
        return gone

    def kill(self) -> ChildExit:
        """kill -9 the one process (nothing flushed, nothing released) and reap it."""
        assert self.mesh is not None
        os.kill(self.pid, signal.SIGKILL)
        gone = self.wait_exit()
        assert gone.returncode == -signal.SIGKILL, gone.describe()
        return gone

    def stop(self) -> dict[str, int]:
        """SIGTERM the process (the mesh's grace, then SIGKILL); return each service's exit status."""
        assert self.mesh is not None
        codes = self.mesh.stop()
        self.mesh = None
        return codes

    def close(self) -> None:
        """Stop the process if it is up; drop the databases this made."""
        try:
            if self.mesh is not None:
                self.stop()
        finally:
            if self.databases:
                run_async(lambda: drop_databases(self.databases))


def sqlite_one_process(root: Path, emu: ProviderEmulator) -> OneProcess:
    """A OneProcess on SQLite files in its state dir (not started)."""
    return OneProcess(root, emu, {**emulator_env(emu), "AGENTRT_RUNS_REPLICA_ID": "a"})


def postgres_one_process(root: Path, emu: ProviderEmulator) -> OneProcess:
    """A OneProcess on fresh PostgreSQL databases for runs, sessions, tools and gateway (not started).

    As the crash tests' mesh (chaos_helpers.start_chaos_mesh): a short run lease, the
    gateway's model-call journal on PostgreSQL with a short lease of its own.
    """
    tag = uuid.uuid4().hex[:10]
    names = [f"{PG_DATABASE}_onep_{svc}_{tag}" for svc in ("runs", "sessions", "tools", "gateway")]
    run_async(lambda: create_databases(names))
    urls = [f"postgresql+asyncpg://postgres@{PG_HOST}/{n}" for n in names]
    env = {
        **emulator_env(emu),
        "AGENTRT_RUNS_DB": urls[0],
        "AGENTRT_SESSIONS_DB": urls[1],
        "AGENTRT_TOOLS_DB": urls[2],
        "AGENTRT_GATEWAY_DB": urls[3],
        "AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS": "3",
        "AGENTRT_RUNS_LEASE_SECONDS": str(LEASE_SECONDS),
        "AGENTRT_RUNS_PEER_UNAVAILABLE_SECONDS": "60",
        "AGENTRT_RUNS_REPLICA_ID": "a",
    }
    return OneProcess(root, emu, env, databases=names)


async def start_run(address: str, cell: str, workspace: Path) -> pb.StartRunResponse:
    """Start a run of an inline agent with exec_command whose input names `cell`."""
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command")],
        limits=pb.AgentLimits(max_turns=4),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        return await pb_grpc.RunServiceStub(channel).StartRun(
            pb.StartRunRequest(agent=agent, input=f"do cell:{cell}", workspace=str(workspace))
        )


async def get_run(address: str, run_id: str) -> pb.Run:
    """GetRun."""
    async with grpc.aio.insecure_channel(address) as channel:
        return (await pb_grpc.RunServiceStub(channel).GetRun(pb.GetRunRequest(run_id=run_id))).run
