"""A runs replica killed with kill -9 and started again under the same replica id (decision 0045).

RunService is `agentrt serve runs` as a subprocess with a stable `AGENTRT_RUNS_REPLICA_ID`
and a lease far longer than any wait here (LEASE_S); the rest of the mesh runs in this
process (the production servers, the provider emulator). The process is killed while its
run's command runs in the tool service and started again under the same id: it takes its
run back at start (the lease is still live, held in its own name) instead of waiting out the
lease, and the run completes with the command run once and no model call made twice.

A replica id names one live process at a time (docs/operations.md); should a zombie of the
old process exist anyway (here: SIGSTOP, and a second process started under the same id),
the takeback's new fencing token fences it out: when it wakes, it writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.core.decide import mint_call_id
from agentrt.mesh.storage.db import Database, sqlite_url
from agentrt.runs.storage.leases import lease_overlaps
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.ports import free_ports
from tests.service.runs import harness
from tests.service.runs.harness import Mesh, agent, start_mesh
from tests.service.runs.test_runs_takeover import until

pytestmark = pytest.mark.slow

#: The processes' lease, seconds: far past WAIT_S, so only a takeback at start continues a run.
LEASE_S = 600


class RunsProcess:
    """`agentrt serve runs` as a child process, under a replica id of the test's choosing."""

    def __init__(self, tmp: Path, name: str, replica_id: str, db_url: str, mesh: Mesh) -> None:
        self.tmp, self.name, self.port = tmp, name, free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.args = [
            sys.executable, "-m", "agentrt.cli.main", "serve", "runs", "--port", str(self.port),
            "--db", db_url, "--gateway-addr", mesh.addresses["gateway"],
            "--tools-addr", mesh.addresses["tools"], "--sessions-addr", mesh.addresses["sessions"],
        ]  # fmt: skip
        self.env = {
            **os.environ, "AGENTRT_RUNS_REPLICA_ID": replica_id, "AGENTRT_RUNS_LEASE_SECONDS": str(LEASE_S),
            "AGENTRT_DEFAULT_MODEL": "openai:gpt-test", "AGENTRT_STATE_DIR": str(tmp),
            "AGENTRT_LOG_LEVEL": "INFO",
        }  # fmt: skip
        self.env.pop("AGENTRT_SUPERVISOR_PID", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    async def start(self) -> pb_grpc.RunServiceStub:
        """Start the process (again) on its port; return a stub once it serves."""
        self.starts += 1
        log = open(self.tmp / f"{self.name}-{self.starts}.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )

        async def serving() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            try:
                async with grpc.aio.insecure_channel(self.address) as channel:
                    resp = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=2
                    )
                return resp.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.aio.AioRpcError:
                return False

        await until(serving, f"runs process {self.name} to serve")
        return pb_grpc.RunServiceStub(grpc.aio.insecure_channel(self.address))

    def kill(self) -> None:
        """kill -9: nothing flushed, no lease released."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(15)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob(f"{self.name}-*.log")))


@pytest.fixture
async def runs_db(tmp_path, backend) -> str:
    """The processes' runs database: a SQLite file, or a fresh PostgreSQL database."""
    if backend == "sqlite":
        return sqlite_url(str(tmp_path), "runs-process")
    await harness.require_pg()
    return await harness.fresh_pg_database(harness.pg_server(), "runs_restart")


@pytest.fixture
async def processes():
    started: list[RunsProcess] = []
    yield started
    for proc in started:
        proc.stop()


def _script(emulator, workspace: Path) -> None:
    cmd = f"echo start >> {workspace}/starts.txt; sleep 2; echo line >> {workspace}/lines.txt; echo finished"
    emulator.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))]),
            Reply(text="carried on"),
        ]
    )


async def _command_running(mesh: Mesh, run_id: str, workspace: Path) -> None:
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))
    call_id = mint_call_id(run_id, 1, 0)

    async def running() -> bool:
        got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED and (workspace / "starts.txt").exists()

    await until(running, "the command to run in the tool service")


async def _completed(stub: pb_grpc.RunServiceStub, run_id: str) -> pb.Run:
    async def done() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=run_id))).run
        return run.status in (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)

    await until(done, "the run to end")
    return (await stub.GetRun(pb.GetRunRequest(run_id=run_id))).run


async def _log(
    db_url: str, run_id: str
) -> tuple[list[tuple[int, str, dict]], list[tuple[int, str, int, str]]]:
    store = RunStore(Database(db_url))
    try:
        return await store.read_log(run_id), await store.log_leases(run_id)
    finally:
        await store.db.close()


def _check_once(mesh: Mesh, workspace: Path, log: list[tuple[int, str, dict]], leases) -> None:
    """The command ran once, no model call was made twice, no lease was held twice."""
    assert (workspace / "starts.txt").read_text() == "start\n"
    assert (workspace / "lines.txt").read_text() == "line\n"
    assert len([p for p, _ in mesh.emu.requests if p == "/v1/responses"]) == 2
    responded = Counter(p["turn"] for _, kind, p in log if kind == "model_responded")
    assert responded == Counter([1, 2]), log
    assert lease_overlaps(leases) == [], leases


async def test_a_replica_restarted_under_its_id_takes_its_runs_back_at_once(
    start_server, tmp_path, emulator, runs_db, processes
):
    mesh = await start_mesh(start_server, tmp_path, emulator)
    proc = RunsProcess(tmp_path, "runs", "runs-restarted", runs_db, mesh)
    processes.append(proc)
    stub = await proc.start()
    workspace = tmp_path / "work" / "restart"
    _script(emulator, workspace)
    started = await stub.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=str(workspace)))
    await _command_running(mesh, started.run_id, workspace)
    proc.kill()
    killed_at = time.monotonic()
    stub = await proc.start()  # same replica id, same port; its run's lease has ~600 s to go
    run = await _completed(stub, started.run_id)
    print(f"the run ended {time.monotonic() - killed_at:.2f} s after the kill (lease: {LEASE_S} s)")
    assert run.status == cpb.RUN_STATUS_COMPLETED, (run.failure, proc.log())
    assert run.final_output == "carried on"
    log, leases = await _log(runs_db, started.run_id)
    _check_once(mesh, workspace, log, leases)
    # the takeback was a takeover: a new fencing token, in the same owner's name
    tokens = sorted({token for _, _, token, owner in leases if owner})
    assert len(tokens) >= 2 and {owner for *_, owner in leases if owner} == {"runs-restarted"}, leases


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_zombie_of_the_old_process_is_fenced_out(
    start_server, tmp_path, emulator, runs_db, processes
):
    """Against the promise (two live processes under one id), to show the fencing holds anyway."""
    mesh = await start_mesh(start_server, tmp_path, emulator)
    old = RunsProcess(tmp_path, "old", "runs-twin", runs_db, mesh)
    new = RunsProcess(tmp_path, "new", "runs-twin", runs_db, mesh)
    processes.extend([old, new])
    stub = await old.start()
    workspace = tmp_path / "work" / "zombie"
    _script(emulator, workspace)
    started = await stub.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=str(workspace)))
    await _command_running(mesh, started.run_id, workspace)
    old.signal(signal.SIGSTOP)  # the zombie: alive, holding its lease and token, not running
    run = await _completed(await new.start(), started.run_id)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "carried on", new.log()
    before = await _log(runs_db, started.run_id)
    old.signal(signal.SIGCONT)

    async def gave_up() -> bool:
        return f"run {started.run_id}: lease lost" in old.log()

    await until(gave_up, "the woken zombie to find its lease lost")
    after = await _log(runs_db, started.run_id)
    assert after == before  # the zombie wrote nothing
    _check_once(mesh, workspace, *after)
