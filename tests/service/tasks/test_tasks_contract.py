"""TaskService contract over a real channel: validation, NOT_FOUND, UNIMPLEMENTED, health."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_of
from agentrt.tasks.config import TasksConfig
from agentrt.tasks.server import build_server
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc


@pytest.fixture
async def tasks(start_server):
    address = await start_server(build_server(TasksConfig(server=ServerConfig(port=0))))
    async with grpc.aio.insecure_channel(address) as channel:
        yield channel


async def test_health_serving(tasks):
    stub = health_pb2_grpc.HealthStub(tasks)
    for name in ("", "agentrt.v1.TaskService"):
        resp = await stub.Check(health_pb2.HealthCheckRequest(service=name))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("method", "request_", "code", "reason"),
    [
        ("GetTask", pb.GetTaskRequest(), grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD"),
        ("GetTask", pb.GetTaskRequest(task_id="t1"), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        ("StopTask", pb.StopTaskRequest(), grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD"),
        ("StopTask", pb.StopTaskRequest(task_id="../x"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ID"),
        (
            "GetTask",
            pb.GetTaskRequest(task_id="t1", wait=duration_pb2.Duration(seconds=-1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        (
            "ListTasks",
            pb.ListTasksRequest(parent_session_id="s", page_size=-1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        ("RetryTask", pb.RetryTaskRequest(task_id="x"), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        ("SpawnTask", pb.SpawnTaskRequest(), grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD"),
        (
            "SpawnTask",
            pb.SpawnTaskRequest(parent_session_id="s", agent_name="a", input="go"),
            grpc.StatusCode.UNIMPLEMENTED,
            "NOT_IMPLEMENTED_YET",
        ),
    ],
)
async def test_bad_input_gets_status_and_reason(tasks, method, request_, code, reason):
    stub = pb_grpc.TaskServiceStub(tasks)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await getattr(stub, method)(request_)
    assert info.value.code() == code
    assert reason_of(info.value) == reason
    # the server keeps serving
    assert (await stub.ListTasks(pb.ListTasksRequest(parent_session_id="s"))).tasks == []


async def test_non_utf8_string_is_invalid_argument(tasks):
    # field 1 (task_id), wire type 2, length 2, bytes that are not UTF-8
    raw = bytes([0x0A, 0x02, 0xFF, 0xFE])
    call = tasks.unary_unary(
        "/agentrt.v1.TaskService/GetTask", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(raw)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "INVALID_UTF8"


async def test_corrupt_bytes_are_malformed_request(tasks):
    call = tasks.unary_unary(
        "/agentrt.v1.TaskService/GetTask", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(b"\xff\xff\xff\xff")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "MALFORMED_REQUEST"


async def test_oversize_request_is_invalid_argument(start_server):
    server = build_server(TasksConfig(server=ServerConfig(port=0, max_request_bytes=1024)))
    address = await start_server(server)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TaskServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SpawnTask(pb.SpawnTaskRequest(parent_session_id="s", agent_name="a", input="x" * 1500))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(info.value) == "REQUEST_TOO_LARGE"


async def test_auth_token_required(start_server):
    server = build_server(TasksConfig(server=ServerConfig(port=0, auth_token="s3cret")))
    address = await start_server(server)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TaskServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListTasks(pb.ListTasksRequest(parent_session_id="s"))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.ListTasks(
            pb.ListTasksRequest(parent_session_id="s"), metadata=[("authorization", "Bearer s3cret")]
        )
        assert list(ok.tasks) == []
        # health needs no token (probes)
        resp = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_port_in_use_is_refused(start_server):
    from agentrt.mesh.server import PortInUseError

    first = build_server(TasksConfig(server=ServerConfig(port=0)))
    address = await start_server(first)
    port = int(address.rsplit(":", 1)[1])
    second = build_server(TasksConfig(server=ServerConfig(port=port)))
    with pytest.raises(PortInUseError):
        await second.start()
