"""Sandbox lifecycle of the local backend: create/adopt/replace, stop keeps files, destroy."""

from __future__ import annotations

import asyncio
import os

import grpc
import pytest
from tools_helpers import pids_with

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb


async def _create(tools, **kw) -> pb.Sandbox:
    return (await tools.stub.CreateSandbox(pb.CreateSandboxRequest(**kw))).sandbox


async def test_lifecycle(tools):
    box = await _create(tools, sandbox_id="sbx_one", env={"GREETING": "hi"})
    assert box.state == pb.SANDBOX_STATE_RUNNING
    assert box.backend == pb.SANDBOX_BACKEND_LOCAL
    assert os.path.isdir(box.workspace)
    result = await tools.sh("echo $GREETING > g.txt; cat g.txt", sandbox_id="sbx_one")
    assert result.content == "hi\n"

    stopped = (await tools.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id="sbx_one"))).sandbox
    assert stopped.state == pb.SANDBOX_STATE_STOPPED
    got = (await tools.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sbx_one"))).sandbox
    assert got.state == pb.SANDBOX_STATE_STOPPED
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.sh("true", sandbox_id="sbx_one")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "SANDBOX_STOPPED"

    # same settings: adopted (resumed) with its files
    again = await _create(tools, sandbox_id="sbx_one", env={"GREETING": "hi"})
    assert again.state == pb.SANDBOX_STATE_RUNNING and again.workspace == box.workspace
    assert (await tools.sh("cat g.txt", sandbox_id="sbx_one")).content == "hi\n"
    # other env: replaced, files survive, the new env is what commands see (004 §2.7n)
    await _create(tools, sandbox_id="sbx_one", env={"GREETING": "hello"})
    assert (await tools.sh("cat g.txt; echo $GREETING", sandbox_id="sbx_one")).content == "hi\nhello\n"

    await tools.stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id="sbx_one"))
    got = (await tools.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sbx_one"))).sandbox
    assert got.state == pb.SANDBOX_STATE_ABSENT
    assert not os.path.exists(box.workspace)


async def test_minted_id_and_caller_workspace_is_kept_on_destroy(tools):
    ws = tools.tmp / "mine"
    box = await _create(tools, workspace=str(ws))
    assert box.sandbox_id.startswith("sbx_")
    await tools.sh("echo data > keep.txt", sandbox_id=box.sandbox_id)
    await tools.stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id=box.sandbox_id))
    assert (ws / "keep.txt").read_text() == "data\n"


async def test_stop_kills_running_commands(tools):
    await _create(tools, sandbox_id="sbx_busy")
    marker = f"agentrt-busy-{os.urandom(4).hex()}"
    call = tools.stub.ExecuteTool(
        tools.request(
            "exec_command", {"cmd": f"exec -a {marker} sleep 300"}, sandbox_id="sbx_busy", timeout=60
        )
    )
    loop = asyncio.get_running_loop()
    end = loop.time() + 10
    while not pids_with(marker):
        assert loop.time() < end, "the command never started"
        await asyncio.sleep(0.02)
    await tools.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id="sbx_busy"))
    resp = await call
    assert resp.result.is_error
    assert resp.result.status == common_pb2.TOOL_RESULT_STATUS_ERROR
    assert "stopped" in resp.result.content
    assert pids_with(marker) == []


@pytest.mark.parametrize(
    ("method", "request_", "code", "reason"),
    [
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(backend=pb.SANDBOX_BACKEND_DOCKER, network="host"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(network="bridge"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "UNSUPPORTED_CAPABILITY",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(image="debian"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "UNSUPPORTED_CAPABILITY",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(sandbox_id="bad id"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ID",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(env={"1BAD": "x"}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(workspace="rel"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(limits=pb.SandboxLimits(cpu_seconds=-1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(backend=9),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        ),
        ("GetSandbox", pb.GetSandboxRequest(), grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD"),
        (
            "GetSandbox",
            pb.GetSandboxRequest(sandbox_id="a b"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ID",
        ),
        (
            "StopSandbox",
            pb.StopSandboxRequest(sandbox_id="sbx_none"),
            grpc.StatusCode.NOT_FOUND,
            "SANDBOX_NOT_FOUND",
        ),
        ("StopSandbox", pb.StopSandboxRequest(), grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD"),
        (
            "DestroySandbox",
            pb.DestroySandboxRequest(sandbox_id="sbx_none"),
            grpc.StatusCode.NOT_FOUND,
            "SANDBOX_NOT_FOUND",
        ),
    ],
)
async def test_bad_sandbox_requests(tools, method, request_, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await getattr(tools.stub, method)(request_)
    assert info.value.code() == code
    assert reason_of(info.value) == reason
    assert (await tools.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sbx_none"))).sandbox.state == (
        pb.SANDBOX_STATE_ABSENT
    )


async def test_sandboxes_are_per_tenant(tools):
    await _create(tools, sandbox_id="sbx_t")
    other = await tools.stub.GetSandbox(
        pb.GetSandboxRequest(sandbox_id="sbx_t"), metadata=[("x-agentrt-tenant", "acme")]
    )
    assert other.sandbox.state == pb.SANDBOX_STATE_ABSENT
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.StopSandbox(
            pb.StopSandboxRequest(sandbox_id="sbx_t"), metadata=[("x-agentrt-tenant", "acme")]
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
