"""TaskService's contract over a real channel: bad input, unknown ids, health, the start gate."""

from __future__ import annotations

import asyncio
import sqlite3

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_of
from agentrt.mesh.storage.db import sqlite_url
from agentrt.tasks.config import TasksConfig
from agentrt.tasks.server import build_server
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc
from tests.service.runs.harness import agent

IA, NF = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND


@pytest.fixture
async def backend() -> str:
    """Validation does not depend on the backend: SQLite only."""
    return "sqlite"


def _spawn(parent: str = "", **kw) -> pb.SpawnTaskRequest:  # noqa: D103
    kw.setdefault("input", "go")
    if "agent_name" not in kw and "no_agent" not in kw:
        kw.setdefault("agent", agent())
    kw.pop("no_agent", None)
    kw.setdefault("parent_session_id", parent)
    return pb.SpawnTaskRequest(**kw)


BAD_SPAWNS = [
    ({"input": "go"}, IA, "MISSING_FIELD", "parent_session_id"),
    ({"parent": "../x"}, IA, "INVALID_ID", "parent_session_id"),
    ({"parent": "P", "input": "  "}, IA, "MISSING_FIELD", "input"),
    ({"parent": "P", "no_agent": True}, IA, "MISSING_FIELD", "agent_name"),
    ({"parent": "P", "agent_name": "a", "agent": agent()}, IA, "INVALID_VALUE", "agent"),  # both set
    ({"parent": "P", "agent_name": "no spaces", "no_agent": True}, IA, "INVALID_AGENT", "agent_name"),
    ({"parent": "P", "agent_version": -1}, IA, "INVALID_VALUE", "agent_version"),
    ({"parent": "P", "label": "x" * 201}, IA, "INVALID_VALUE", "label"),
    ({"parent": "P", "kind": "has space"}, IA, "INVALID_VALUE", "kind"),
    ({"parent": "P", "state": "s" * (64 * 1024 + 1)}, IA, "INVALID_VALUE", "state"),
    ({"parent": "P", "steps": ["x"] * 51}, IA, "INVALID_VALUE", "steps"),
    ({"parent": "P", "steps": ["ok", " "]}, IA, "MISSING_FIELD", "steps[1]"),
    ({"parent": "P", "workspace": "relative/dir"}, IA, "INVALID_VALUE", "workspace"),
    ({"parent": "P", "idempotency_key": "k" * 257}, IA, "INVALID_VALUE", "idempotency_key"),
    ({"parent": "P", "parent_run_id": "bad id"}, IA, "INVALID_ID", "parent_run_id"),
]


@pytest.mark.parametrize(("kw", "code", "reason", "field"), BAD_SPAWNS)
async def test_bad_spawns_are_refused_and_change_nothing(tm, kw, code, reason, field):
    parent = await tm.parent()
    kw = dict(kw)
    given = kw.pop("parent", "")
    kw["parent_session_id"] = parent if given == "P" else given
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.tasks.SpawnTask(_spawn(**kw))
    assert info.value.code() == code and reason_of(info.value) == reason, info.value.details()
    from agentrt.mesh.status import details_of

    assert details_of(info.value)[1].get("field") == field
    assert list((await tm.tasks.ListTasks(pb.ListTasksRequest())).tasks) == []


async def test_unknown_parent_and_agent_are_not_found(tm):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.tasks.SpawnTask(_spawn("sess_unknown"))
    assert info.value.code() == NF and reason_of(info.value) == "SESSION_NOT_FOUND"
    parent = await tm.parent()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.tasks.SpawnTask(_spawn(parent, agent_name="nobody", no_agent=True))
    assert info.value.code() == NF and reason_of(info.value) == "AGENT_NOT_FOUND"
    assert list((await tm.tasks.ListTasks(pb.ListTasksRequest())).tasks) == []


@pytest.mark.parametrize(
    ("method", "request_", "code", "reason"),
    [
        ("GetTask", pb.GetTaskRequest(), IA, "MISSING_FIELD"),
        ("GetTask", pb.GetTaskRequest(task_id="../x"), IA, "INVALID_ID"),
        ("GetTask", pb.GetTaskRequest(task_id="tsk_1"), NF, "TASK_NOT_FOUND"),
        (
            "GetTask",
            pb.GetTaskRequest(task_id="t1", wait=duration_pb2.Duration(seconds=-1)),
            IA,
            "INVALID_VALUE",
        ),
        (
            "GetTask",
            pb.GetTaskRequest(task_id="t1", wait=duration_pb2.Duration(seconds=121)),
            IA,
            "INVALID_VALUE",
        ),
        (  # a malformed Duration (mixed signs) is refused, not read as 0.5 s
            "GetTask",
            pb.GetTaskRequest(task_id="t1", wait=duration_pb2.Duration(seconds=1, nanos=-500_000_000)),
            IA,
            "INVALID_VALUE",
        ),
        (  # nanos out of range
            "GetTask",
            pb.GetTaskRequest(task_id="t1", wait=duration_pb2.Duration(seconds=0, nanos=2_000_000_000)),
            IA,
            "INVALID_VALUE",
        ),
        ("ListTasks", pb.ListTasksRequest(parent_session_id="bad id"), IA, "INVALID_ID"),
        ("ListTasks", pb.ListTasksRequest(page_size=-1), IA, "INVALID_VALUE"),
        ("ListTasks", pb.ListTasksRequest(page_size=1001), IA, "INVALID_VALUE"),
        ("ListTasks", pb.ListTasksRequest(page_token="not-a-token"), IA, "INVALID_VALUE"),
        ("ListTasks", pb.ListTasksRequest(parent_session_id="sess_unknown"), NF, "SESSION_NOT_FOUND"),
        ("RetryTask", pb.RetryTaskRequest(), IA, "MISSING_FIELD"),
        ("RetryTask", pb.RetryTaskRequest(task_id="tsk_1"), NF, "TASK_NOT_FOUND"),
        ("StopTask", pb.StopTaskRequest(), IA, "MISSING_FIELD"),
        ("StopTask", pb.StopTaskRequest(task_id="../x"), IA, "INVALID_ID"),
        ("StopTask", pb.StopTaskRequest(task_id="tsk_1"), NF, "TASK_NOT_FOUND"),
        ("StopTask", pb.StopTaskRequest(task_id="tsk_1", reason="r" * 501), IA, "INVALID_VALUE"),
        ("AckTaskResult", pb.AckTaskResultRequest(task_id="tsk_1"), IA, "MISSING_FIELD"),
        ("AckTaskResult", pb.AckTaskResultRequest(task_id="tsk_1", delivery_id="td_1"), NF, "TASK_NOT_FOUND"),
    ],
)
async def test_bad_input_gets_status_and_reason(tm, method, request_, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await getattr(tm.tasks, method)(request_)
    assert info.value.code() == code and reason_of(info.value) == reason, info.value.details()
    # the server keeps serving
    assert list((await tm.tasks.ListTasks(pb.ListTasksRequest())).tasks) == []


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [
        (pb.WatchTasksRequest(), IA, "MISSING_FIELD"),
        (pb.WatchTasksRequest(parent_session_id="x", after_change_seq=-1), IA, "INVALID_VALUE"),
        (pb.WatchTasksRequest(parent_session_id="sess_unknown"), NF, "SESSION_NOT_FOUND"),
    ],
)
async def test_bad_watch_gets_status_and_reason(tm, request_, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in tm.tasks.WatchTasks(request_):
            pass
    assert info.value.code() == code and reason_of(info.value) == reason


async def test_health_serving(tm):
    async with grpc.aio.insecure_channel(tm.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", "agentrt.v1.TaskService"):
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=name))
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_non_utf8_and_corrupt_bytes_are_invalid_argument(tm):
    async with grpc.aio.insecure_channel(tm.address) as channel:
        call = channel.unary_unary("/agentrt.v1.TaskService/GetTask")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(bytes([0x0A, 0x02, 0xFF, 0xFE]))  # task_id: bytes that are not UTF-8
        assert info.value.code() == IA and reason_of(info.value) == "INVALID_UTF8"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(b"\xff\xff\xff\xff")
        assert info.value.code() == IA and reason_of(info.value) == "MALFORMED_REQUEST"


def _config(tmp_path, **server) -> TasksConfig:
    return TasksConfig(
        server=ServerConfig(**{"port": 0, "db_url": sqlite_url(str(tmp_path), "tasks"), **server}),
        runs_address="127.0.0.1:1",
        sessions_address="127.0.0.1:1",
        peer_unavailable_seconds=0.0,
    )


async def test_oversize_request_is_invalid_argument(start_server, tmp_path):
    address = await start_server(build_server(_config(tmp_path, max_request_bytes=1024)))
    async with grpc.aio.insecure_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.TaskServiceStub(channel).SpawnTask(_spawn("s", input="x" * 1500))
        assert info.value.code() == IA and reason_of(info.value) == "REQUEST_TOO_LARGE"


async def test_auth_token_required(start_server, tmp_path):
    address = await start_server(build_server(_config(tmp_path, auth_token="s3cret")))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TaskServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListTasks(pb.ListTasksRequest())
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.ListTasks(pb.ListTasksRequest(), metadata=[("authorization", "Bearer s3cret")])
        assert list(ok.tasks) == []
        resp = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_port_in_use_is_refused(start_server, tmp_path):
    from agentrt.mesh.server import PortInUseError

    address = await start_server(build_server(_config(tmp_path)))
    port = int(address.rsplit(":", 1)[1])
    second = build_server(_config(tmp_path, port=port))
    with pytest.raises(PortInUseError):
        await second.start()


async def test_requests_wait_for_the_start_sweep(tmp_path):
    """Until the ready hook (migration, then the restart sweep) ran: NOT_SERVING, and every
    RPC answers UNAVAILABLE/SERVICE_STARTING. The database is held locked to keep it there."""
    config = _config(tmp_path)
    path = config.server.db_url.split("///", 1)[1]
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("PRAGMA journal_mode=WAL")
    blocker.execute("BEGIN IMMEDIATE")  # the migration's write waits (busy timeout 10 s)
    server = build_server(config)
    starting = asyncio.create_task(server.start())
    try:
        while not server.port:
            await asyncio.sleep(0.01)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await pb_grpc.TaskServiceStub(channel).ListTasks(pb.ListTasksRequest())
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert reason_of(info.value) == "SERVICE_STARTING"
            blocker.execute("ROLLBACK")
            await asyncio.wait_for(starting, 30)
            health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert list((await pb_grpc.TaskServiceStub(channel).ListTasks(pb.ListTasksRequest())).tasks) == []
    finally:
        blocker.close()
        if not starting.done():
            starting.cancel()
        await server.stop(grace=0)


async def test_another_tenants_tasks_are_not_found(tm):
    from tests.emulators.providers import Reply

    tm.mesh.emu.script([Reply(text="mine")])
    parent = await tm.parent()
    task = await tm.spawn(parent)
    other = [("x-agentrt-tenant", "someone-else")]
    calls = [
        tm.tasks.GetTask(pb.GetTaskRequest(task_id=task.task_id), metadata=other),
        tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id), metadata=other),
        tm.tasks.RetryTask(pb.RetryTaskRequest(task_id=task.task_id), metadata=other),
        tm.tasks.AckTaskResult(
            pb.AckTaskResultRequest(task_id=task.task_id, delivery_id="td_x"), metadata=other
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == NF and reason_of(info.value) == "TASK_NOT_FOUND"
    assert list((await tm.tasks.ListTasks(pb.ListTasksRequest(), metadata=other)).tasks) == []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tm.tasks.SpawnTask(_spawn(parent), metadata=other)
    assert info.value.code() == NF and reason_of(info.value) == "SESSION_NOT_FOUND"
    assert (await tm.get(task.task_id)).task_id == task.task_id  # the owner still sees it
