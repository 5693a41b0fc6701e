"""kill -9 of a real TaskService process, on PostgreSQL, at two named points.

The rest of the mesh runs in this process (the production servers, the provider
emulator); TaskService is `agentrt serve tasks` as a subprocess with a stable replica
name, killed with SIGKILL and started again:

- "running": while its task's run is in a command. The run lives on in RunService; the
  restarted process takes its own leases back, follows the run, and the task completes.
  The parent is told once, and no model call was made twice.
- "launching": between the task row's claim and StartRun's answer (RunService's address
  is a listener that never answers). The restart sweep fails the task before the service
  serves, the parent is told, and a retry then runs exactly one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.storage.db import Database
from agentrt.tasks.storage.store import TaskStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.ports import free_ports
from tests.service.runs.harness import start_mesh
from tests.service.tasks.harness import TaskMesh, tasks_db_url, until

pytestmark = pytest.mark.slow


class TaskProcess:
    """`agentrt serve tasks` as a child process."""

    def __init__(self, tmp, port: int, db_url: str, runs: str, sessions: str) -> None:
        self.tmp, self.port = tmp, port
        self.args = [
            sys.executable, "-m", "agentrt.cli.main", "serve", "tasks", "--port", str(port), "--db", db_url,
            "--runs-addr", runs, "--sessions-addr", sessions,
        ]  # fmt: skip
        self.env = {
            **os.environ, "AGENTRT_TASKS_REPLICA_ID": "tasks-killed", "AGENTRT_TASKS_LEASE_SECONDS": "1",
            "AGENTRT_TASKS_NOTIFY_GRACE_SECONDS": "0.2", "AGENTRT_STATE_DIR": str(tmp),
        }  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    async def start(self, runs: str | None = None) -> pb_grpc.TaskServiceStub:
        if runs is not None:
            self.args[self.args.index("--runs-addr") + 1] = runs
        self.starts += 1
        log = open(self.tmp / f"tasks-{self.starts}.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        address = f"127.0.0.1:{self.port}"

        async def serving() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            try:
                async with grpc.aio.insecure_channel(address) as channel:
                    resp = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=2
                    )
                return resp.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.aio.AioRpcError:
                return False

        await until(serving, bool, "the task service to serve")
        return pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(address))

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)

    def log(self) -> str:
        return "\n".join((p.read_text(errors="replace")) for p in sorted(self.tmp.glob("tasks-*.log")))


@pytest.fixture
async def killable(start_server, tmp_path, emulator):
    mesh = await start_mesh(start_server, tmp_path, emulator)
    db_url = await tasks_db_url("postgres", mesh.tmp)
    proc = TaskProcess(tmp_path, free_ports(1)[0], db_url, mesh.runs_address, mesh.addresses["sessions"])
    try:
        yield mesh, proc, db_url
    finally:
        proc.stop()


async def _notes(mesh, parent: str) -> list:
    return [e for e in await mesh.entries(parent) if '"task_notification"' in e.display.extra_json]


async def test_kill_9_while_the_run_works_then_the_task_completes_once(killable):
    mesh, proc, db_url = killable
    tm = TaskMesh(mesh, await proc.start(), None, "", db_url, None)  # type: ignore[arg-type]
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 1"}')]), Reply(text="survived")]
    )
    parent = await tm.parent()
    task = await tm.spawn(parent)
    await mesh.events(task.run_id, until="tool_called")
    proc.kill()  # named point: the task's run is inside its command
    tm.tasks = await proc.start()
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "survived" and done.attempt == 1, proc.log()
    await until(lambda: _notes(mesh, parent), lambda n: len(n) == 1, "the parent to be told")
    assert len(mesh.emu.requests) == 2  # no model call was made twice
    runs = (await mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=task.session_id))).runs
    assert [r.run_id for r in runs] == [task.run_id]
    await tm.wait_notified(task.task_id)  # recorded as delivered: it is not owed again
    assert len(await _notes(mesh, parent)) == 1


async def test_kill_9_mid_launch_then_the_sweep_fails_it_and_a_retry_runs_once(killable):
    mesh, proc, db_url = killable

    async def black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accept, never answer: StartRun hangs

    hole = await asyncio.start_server(black_hole, "127.0.0.1", 0)
    hole_address = f"127.0.0.1:{hole.sockets[0].getsockname()[1]}"
    store_db = Database(db_url)
    try:
        tasks = await proc.start(runs=hole_address)
        tm = TaskMesh(mesh, tasks, None, "", db_url, None)  # type: ignore[arg-type]
        parent = await tm.parent()
        spawning = asyncio.ensure_future(tm.spawn(parent))
        store = TaskStore(store_db)

        async def launching():
            page = await store.page("default", None, 10, None)
            mine = [t for t in page if t.parent_session_id == parent]
            return mine[0] if mine and mine[0].session_id and not mine[0].run_id else None

        row = await until(launching, lambda t: t is not None, "the task to be claimed and launching")
        proc.kill()  # named point: claimed, hidden session made, StartRun not answered
        with pytest.raises(grpc.aio.AioRpcError):
            await spawning
        tm.tasks = await proc.start(runs=mesh.runs_address)
        # by the time it serves, the sweep has failed the interrupted task
        got = await tm.get(row.task_id)
        assert got.status == pb.TASK_STATUS_FAILED and got.failure.kind == "interrupted", proc.log()
        await until(lambda: _notes(mesh, parent), lambda n: len(n) == 1, "the parent to be told")
        mesh.emu.script([Reply(text="ran once")])
        retried = await tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=row.task_id))
        assert retried.launched and retried.task.attempt == 2
        done = await tm.wait_task(row.task_id, pb.TASK_STATUS_COMPLETED)
        runs = (await mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=done.session_id))).runs
        assert [r.run_id for r in runs] == [done.run_id] and runs[0].status == cpb.RUN_STATUS_COMPLETED
        assert len(mesh.emu.requests) == 1
        await until(lambda: _notes(mesh, parent), lambda n: len(n) == 2, "the completion to be told")
    finally:
        hole.close()
        await store_db.close()
