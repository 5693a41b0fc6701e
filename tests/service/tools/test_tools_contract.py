"""ToolService contract: catalog, bad input answered with status + reason, the server keeps serving."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tools_helpers import make_config

from agentrt.mesh.status import reason_of
from agentrt.tools.config import ToolsConfig
from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc


async def test_health_serving_after_probe(tools):
    stub = health_pb2_grpc.HealthStub(tools.channel)
    for name in ("", "agentrt.v1.ToolService"):
        resp = await stub.Check(health_pb2.HealthCheckRequest(service=name))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_list_tools_has_schemas_and_capabilities(tools):
    resp = await tools.stub.ListTools(pb.ListToolsRequest())
    specs = {t.name: t for t in resp.tools}
    assert {"exec_command", "read_file", "write_file", "list_files", "apply_patch"} <= set(specs)
    for spec in specs.values():
        schema = json.loads(spec.parameters_json_schema)
        assert schema["type"] == "object"
        assert spec.description
    assert json.loads(specs["exec_command"].parameters_json_schema)["required"] == ["cmd"]
    # named shells are on by default, so session_id is offered (004 §2.7k; off: test_tools_shells.py)
    assert "session_id" in json.loads(specs["exec_command"].parameters_json_schema)["properties"]
    assert specs["read_file"].read_only and specs["read_file"].retry_safe
    assert specs["list_files"].read_only
    assert not specs["exec_command"].read_only and not specs["exec_command"].retry_safe
    assert not specs["write_file"].read_only
    assert specs["read_file"].timeout.seconds == 30


def _req(**kw) -> pb.ExecuteToolRequest:
    call = kw.pop("call", common_pb2.ToolCall(call_id="c1", name="list_files", arguments="{}"))
    return pb.ExecuteToolRequest(call=call, **kw)


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [
        (_req(workspace="/tmp/x"), grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD"),  # no run_id
        (
            _req(run_id="r", call=common_pb2.ToolCall(name="list_files")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "MISSING_FIELD",
        ),  # no call_id
        (
            _req(run_id="r", call=common_pb2.ToolCall(call_id="c")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "MISSING_FIELD",
        ),  # no tool name
        (_req(run_id="bad id!"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ID"),
        (
            _req(run_id="r", call=common_pb2.ToolCall(call_id="c/../x", name="list_files")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ID",
        ),
        (
            _req(run_id="r", call=common_pb2.ToolCall(call_id="c", name="rm_rf")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "UNKNOWN_TOOL",
        ),
        (_req(run_id="r", workspace="relative/dir"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        (_req(run_id="r", workspace="/"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        (_req(run_id="r", workspace="/etc/agentrt"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        (
            _req(run_id="r", workspace="/nonexistent-parent/ws"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        (_req(run_id="r", max_output_bytes=-1), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        (_req(run_id="r", sandbox_id="sbx_nope"), grpc.StatusCode.NOT_FOUND, "SANDBOX_NOT_FOUND"),
        (
            _req(run_id="r", sandbox_id="sbx_x", workspace="/tmp/x"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
    ],
)
async def test_bad_execute_requests(tools, request_, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.ExecuteTool(request_)
    assert info.value.code() == code
    assert reason_of(info.value) == reason
    # nothing was recorded, and the server keeps serving
    if (
        request_.run_id
        and request_.call.call_id
        and "!" not in request_.run_id
        and "/" not in request_.call.call_id
    ):
        got = await tools.stub.GetExecution(
            pb.GetExecutionRequest(run_id=request_.run_id, call_id=request_.call.call_id)
        )
        assert got.state == pb.EXECUTION_STATE_ABSENT
    assert (await tools.stub.ListTools(pb.ListToolsRequest())).tools


async def test_workspace_inside_state_dir_is_refused(tools):
    state = tools.config.server.state_dir
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.run("list_files", workspace=state)
    assert reason_of(info.value) == "INVALID_VALUE"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.run("list_files", workspace=str(tools.tmp))  # contains the state dir
    assert reason_of(info.value) == "INVALID_VALUE"


@pytest.mark.parametrize(
    ("arguments", "invalid"),
    [
        ("", "{not json"),
        ("[1, 2]", ""),
        ('{"cmd": 42}', ""),
        ('{"cmd": ""}', ""),
        ('{"cmd": "ls", "workdir": true}', ""),
        ('{"cmd": "ls", "workdir": 3.14}', ""),
        ('{"cmd": "ls", "timeout_ms": "soon"}', ""),
        ('{"cmd": "ls", "timeout_ms": 0}', ""),
    ],
)
async def test_malformed_arguments_are_an_error_result(tools, arguments, invalid):
    call = common_pb2.ToolCall(
        call_id="c1", name="exec_command", arguments=arguments, invalid_arguments=invalid
    )
    resp = await tools.stub.ExecuteTool(
        pb.ExecuteToolRequest(run_id="r1", call=call, workspace=str(tools.workspace))
    )
    assert resp.result.is_error
    assert resp.result.status == common_pb2.TOOL_RESULT_STATUS_ERROR
    assert resp.result.content  # tells the model what to resend
    assert json.loads(resp.result.details_json)["reason"] == "INVALID_ARGUMENTS"
    assert not (await tools.sh("echo still-serving")).is_error


async def test_zero_value_sentinels_decode_to_empty(tools):
    # 004 §2.7l: null, 0 and false mean "not set" for optional strings
    for sentinel in ("null", "0", "false"):
        resp = await tools.run(
            "exec_command", f'{{"cmd": "pwd", "workdir": {sentinel}}}', call_id=f"c_{sentinel}"
        )
        assert not resp.result.is_error, resp.result.content
        assert resp.result.content.strip() == str(tools.workspace)


async def test_non_utf8_request_is_invalid_argument(tools):
    raw = bytes([0x0A, 0x02, 0xFF, 0xFE])  # run_id with bytes that are not UTF-8
    call = tools.channel.unary_unary(
        "/agentrt.v1.ToolService/ExecuteTool", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(raw)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "INVALID_UTF8"
    assert (await tools.stub.ListTools(pb.ListToolsRequest())).tools


async def test_get_execution_validates(tools):
    for req, reason in (
        (pb.GetExecutionRequest(call_id="c"), "MISSING_FIELD"),
        (pb.GetExecutionRequest(run_id="r"), "MISSING_FIELD"),
        (pb.GetExecutionRequest(run_id="r r", call_id="c"), "INVALID_ID"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await tools.stub.GetExecution(req)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(info.value) == reason
    absent = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="r", call_id="c"))
    assert absent.state == pb.EXECUTION_STATE_ABSENT


async def test_unavailable_sandbox_refuses_commands_but_files_work(start_server, tmp_path):
    config = make_config(tmp_path, bwrap_path=str(tmp_path / "no-such-bwrap"))
    address = await start_server(build_server(config))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        call = common_pb2.ToolCall(call_id="c1", name="exec_command", arguments='{"cmd": "true"}')
        req = pb.ExecuteToolRequest(run_id="r1", call=call, workspace=str(tmp_path / "ws"))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ExecuteTool(req)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(info.value) == "SANDBOX_UNAVAILABLE"
        got = await stub.GetExecution(pb.GetExecutionRequest(run_id="r1", call_id="c1"))
        assert got.state == pb.EXECUTION_STATE_ABSENT  # refused calls leave no record
        write = common_pb2.ToolCall(
            call_id="c2", name="write_file", arguments='{"path": "a.txt", "content": "hi"}'
        )
        resp = await stub.ExecuteTool(
            pb.ExecuteToolRequest(run_id="r1", call=write, workspace=str(tmp_path / "ws"))
        )
        assert not resp.result.is_error
        assert (tmp_path / "ws" / "a.txt").read_text() == "hi"


def test_config_refuses_unknown_sandbox_mode():
    with pytest.raises(ValueError):
        ToolsConfig(sandbox="none")


async def test_unconfined_is_an_explicit_loud_opt_in(start_server, tmp_path, capsys):
    config = make_config(tmp_path, sandbox="unconfined")
    address = await start_server(build_server(config))
    assert "UNCONFINED" in capsys.readouterr().err.upper()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        call = common_pb2.ToolCall(call_id="c1", name="exec_command", arguments='{"cmd": "echo hi; id -u"}')
        resp = await stub.ExecuteTool(
            pb.ExecuteToolRequest(run_id="r1", call=call, workspace=str(tmp_path / "ws"))
        )
        assert resp.result.content.splitlines()[0] == "hi"
        assert resp.result.content.splitlines()[1] != "0"  # never root, even unconfined
        assert json.loads(resp.result.details_json)["sandbox"] == "unconfined"
