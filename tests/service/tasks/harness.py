"""The mesh for TaskService tests: the real RunService mesh in-process, plus TaskService.

Sessions, tools, gateway and runs come from tests/service/runs/harness.py (each its
production `build_server()`, the gateway pointed at the provider emulator); TaskService is
its own `build_server()` over SQLite (a fresh file) or PostgreSQL (the test database of
tests/stores.py, whose two task tables this suite empties before each test: nothing else
uses them). Timings are shortened (lease, poll, grace) so waits end quickly; every wait in
a test is for a state, bounded by WAIT_S.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pytest

from agentrt.core.ids import new_id
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.server import PortInUseError
from agentrt.mesh.storage.db import Database, sqlite_url
from agentrt.runs.config import RunsConfig
from agentrt.runs.server import build_server as build_runs
from agentrt.tasks.config import TasksConfig
from agentrt.tasks.domain import Task, TaskStatus, new_launch_id
from agentrt.tasks.server import TaskServer, build_server
from agentrt.tasks.storage.migrate import upgrade
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc
from tests.needs import unavailable
from tests.ports import free_port
from tests.service.runs.harness import WAIT_S, Mesh, agent, start_mesh
from tests.stores import PG_URL, pg_reachable

T = TypeVar("T")

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


async def tasks_db_url(backend: str, tmp: str) -> str:
    """The tasks database of a test: a fresh SQLite file, or the emptied PostgreSQL tables."""
    if backend == "sqlite":
        return sqlite_url(tmp, "tasks")
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    db = Database(PG_URL)
    try:
        await upgrade(db)
        async with db.write() as conn:
            await conn.exec_driver_sql("DELETE FROM tasks")
            await conn.exec_driver_sql("DELETE FROM task_parents")
    finally:
        await db.close()
    return PG_URL


def tasks_config(mesh: Mesh, db_url: str, **kw: Any) -> TasksConfig:
    """A TaskService config on 127.0.0.1:0 driving mesh, with short timings."""
    values: dict[str, Any] = {
        "server": ServerConfig(port=0, db_url=db_url, state_dir=mesh.tmp, grace_seconds=0.5),
        "runs_address": mesh.runs_address,
        "sessions_address": mesh.addresses["sessions"],
        "lease_seconds": 3.0,
        "poll_seconds": 0.05,
        "notify_grace_seconds": 0.3,
        "hold_seconds": 30.0,
        "stop_wait_seconds": 1.0,
        "cancel_wait_seconds": 10.0,
        "parent_check_seconds": 0.5,
        "peer_unavailable_seconds": 5.0,
    }
    values.update(kw)
    return TasksConfig(**values)


async def until(fetch: Callable[[], Awaitable[T]], ok: Callable[[T], bool], what: str) -> T:
    """Fetch until ok(value); fail naming `what` after WAIT_S seconds."""

    async def poll() -> T:
        while True:
            value = await fetch()
            if ok(value):
                return value
            await asyncio.sleep(0.02)

    try:
        return await asyncio.wait_for(poll(), WAIT_S)
    except TimeoutError as exc:
        raise AssertionError(f"timed out waiting for {what}") from exc


@dataclass
class TaskMesh:
    """The runs mesh, a TaskService on it, and helpers."""

    mesh: Mesh
    tasks: pb_grpc.TaskServiceStub
    server: TaskServer
    address: str
    db_url: str
    start_server: Callable[..., Awaitable[str]]

    async def replica(self, **kw: Any) -> tuple[pb_grpc.TaskServiceStub, TaskServer]:
        """Start another TaskService over the same database and mesh."""
        server = build_server(tasks_config(self.mesh, self.db_url, **kw))
        address = await self.start_server(server)
        return pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(address)), server

    async def parent(self, title: str = "parent") -> str:
        """Create a visible session to spawn tasks from."""
        resp = await self.mesh.sessions.CreateSession(spb.CreateSessionRequest(title=title))
        return resp.session.session_id

    async def spawn(self, parent: str, stub: pb_grpc.TaskServiceStub | None = None, **kw: Any) -> pb.Task:
        """Spawn a task with the emulator's agent (input "go" unless given)."""
        kw.setdefault("input", "go")
        if "agent_name" not in kw:
            kw.setdefault("agent", agent())
        resp = await (stub or self.tasks).SpawnTask(pb.SpawnTaskRequest(parent_session_id=parent, **kw))
        return resp.task

    async def get(self, task_id: str, stub: pb_grpc.TaskServiceStub | None = None) -> pb.Task:
        """GetTask, at once."""
        return (await (stub or self.tasks).GetTask(pb.GetTaskRequest(task_id=task_id))).task

    async def wait_task(self, task_id: str, *statuses: int, what: str = "") -> pb.Task:
        """Poll GetTask until the task is in one of statuses."""
        names = ", ".join(pb.TaskStatus.Name(s) for s in statuses)
        return await until(
            lambda: self.get(task_id), lambda t: t.status in statuses, what or f"task in {names}"
        )

    async def wait_notified(self, task_id: str, after_seq: int = 0) -> pb.Task:
        """Poll GetTask until the task's ending was notified to its parent (after a seq)."""
        return await until(
            lambda: self.get(task_id),
            lambda t: t.notified_seq > after_seq and not t.pending_delivery_id,
            "the ending to be notified",
        )

    async def wait_notes(self, parent: str, count: int) -> list[spb.Entry]:
        """Poll the parent session until it holds `count` notifications."""
        return await until(
            lambda: self.notifications(parent), lambda n: len(n) >= count, f"{count} notifications"
        )

    async def run(self, run_id: str) -> rpb.Run:
        """GetRun on RunService."""
        return (await self.mesh.runs.GetRun(rpb.GetRunRequest(run_id=run_id))).run

    async def wait_run(self, run_id: str, *statuses: int) -> rpb.Run:
        """Poll GetRun until the run is in one of statuses."""
        return await until(lambda: self.run(run_id), lambda r: r.status in statuses, "the run's status")

    async def notifications(self, session_id: str) -> list[spb.Entry]:
        """The parent session's task notification entries, in seq order."""
        entries = await self.mesh.entries(session_id)
        return [e for e in entries if '"task_notification"' in e.display.extra_json]


async def task_mesh(
    start_server: Callable[..., Awaitable[str]],
    tmp_path: Any,
    emulator: Any,
    backend: str,
    tasks_kw: dict[str, Any] | None = None,
    **runs_kw: Any,
) -> TaskMesh:
    """Start the runs mesh (runs_kw go to its RunsConfig) and a TaskService on it (tasks_kw: its config).

    The TaskService's port is chosen first, so the tool service's task tools call it.
    """
    for attempt in range(3):
        # the port is chosen before it is bound: another process may take it meanwhile
        root = tmp_path if attempt == 0 else tmp_path / f"retry{attempt}"
        root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        mesh = await start_mesh(start_server, root, emulator, tasks_address=f"127.0.0.1:{port}", **runs_kw)
        db_url = await tasks_db_url(backend, mesh.tmp)
        config = tasks_config(mesh, db_url, **(tasks_kw or {}))
        server = build_server(replace_config(config, server=dataclasses.replace(config.server, port=port)))
        try:
            address = await start_server(server)
            break
        except PortInUseError:
            if attempt == 2:
                raise
    stub = pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(address))
    return TaskMesh(mesh, stub, server, address, db_url, start_server)


async def runs_replica(tm: TaskMesh, **runs_kw: Any) -> str:
    """Start another RunService replica over the mesh's runs database; return its address."""
    config = tm.mesh.runs_server.config  # type: ignore[attr-defined]
    replica = build_runs(
        RunsConfig(
            server=ServerConfig(port=0, db_url=config.db_url, state_dir=tm.mesh.tmp),
            gateway_address=tm.mesh.addresses["gateway"],
            tools_address=tm.mesh.addresses["tools"],
            sessions_address=tm.mesh.addresses["sessions"],
            tasks_address="",
            default_model="openai:gpt-test",
            **runs_kw,
        )
    )
    return await tm.start_server(replica)


async def mid_launch(tm: TaskMesh, parent: str, owner: str = "", lease_until: float | None = None) -> Task:
    """A task row as a spawn leaves it between its claim and StartRun: claimed, hidden session made.

    Owned by `owner` (default: tm's server) until `lease_until` (default: a fresh lease).
    """
    deps = tm.server.deps
    assert deps is not None
    ref = spb.SessionRef(session_id=parent)
    session = (await tm.mesh.sessions.GetSession(spb.GetSessionRequest(session=ref))).session
    task = Task(
        tenant="default",
        task_id=new_id("tsk"),
        parent_session_id=parent,
        parent_generation=session.generation,
        status=TaskStatus.WORKING,
        launch_id=new_launch_id(),
        input="go",
        agent_spec=agent().SerializeToString(),
        owner=owner or deps.owner,
        lease_until=deps.lease_until() if lease_until is None else lease_until,
    )
    claimed = await deps.store.claim_spawn(task, 6)
    hidden = await deps.peers.create_hidden("default", parent, "t", {})
    placed = await deps.store.set_session(claimed, claimed.launch_id, hidden.session_id, hidden.generation)
    assert placed is not None
    return placed


def crash(server: TaskServer) -> None:
    """Stop a TaskService's work the way a killed process stops: nothing released, nothing recorded."""
    attempts = server.attempts
    assert attempts is not None and server.deliverer is not None and server.manager is not None
    attempts._closing = True
    waker = server.waker._loop if server.waker is not None else None
    for task in [attempts._loop, server.deliverer._loop, server.manager.trees._loop, waker]:
        if task is not None:
            task.cancel()
    for _, watcher in list(attempts._watchers.values()):
        watcher.cancel()


def replace_config(config: TasksConfig, **kw: Any) -> TasksConfig:
    """A copy of config with fields replaced."""
    return dataclasses.replace(config, **kw)
