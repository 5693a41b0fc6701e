"""open_channel sends the bearer token and tenant on every call kind: unary, server-streaming
and client-streaming (UploadWorkspace, which carried neither before)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import grpc
import pytest

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_code_of, reason_of
from agentrt.mesh.storage.db import sqlite_url
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.tools.config import ToolsConfig
from agentrt.tools.server import build_server as build_tools_server
from agentrt.v1 import error_reason_pb2
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc


async def test_stream_calls_carry_token_and_tenant(start_server, tmp_path):
    config = SessionsConfig(
        server=ServerConfig(port=0, db_url=sqlite_url(str(tmp_path), "s"), auth_token="tok")
    )
    address = await start_server(build_server(config))
    mine = open_channel(address, token="tok", tenant="acme")
    other = open_channel(address, token="tok", tenant="globex")
    try:
        stub = pb_grpc.SessionServiceStub(mine)
        created = await stub.CreateSession(pb.CreateSessionRequest(session_id="s1"))
        await stub.AppendEntries(
            pb.AppendEntriesRequest(
                session=pb.SessionRef(session_id="s1"), entries=[pb.Entry(kind="annotation")]
            )
        )
        # server streaming: the tenant must travel, or the session would be NOT_FOUND
        stream = stub.WatchSession(pb.WatchSessionRequest(session=pb.SessionRef(session_id="s1")))
        first = await stream.read()
        assert first.entry.seq == 1
        assert created.session.generation >= 1
        stream.cancel()
        # another tenant cannot see it, on the streaming call either
        other_stream = pb_grpc.SessionServiceStub(other).WatchSession(
            pb.WatchSessionRequest(session=pb.SessionRef(session_id="s1"))
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await other_stream.read()
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert reason_of(info.value) == "SESSION_NOT_FOUND"
        assert reason_code_of(info.value) == error_reason_pb2.SESSION_NOT_FOUND
    finally:
        await mine.close()
        await other.close()


def _tar(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def test_client_streaming_calls_carry_token_and_tenant(start_server, tmp_path):
    config = ToolsConfig(server=ServerConfig(port=0, state_dir=str(tmp_path / "state"), auth_token="tok"))
    address = await start_server(build_tools_server(config))
    channel = open_channel(address, token="tok", tenant="acme")
    try:
        stub = tpb_grpc.ToolServiceStub(channel)

        async def chunks():
            yield tpb.UploadWorkspaceRequest(target=tpb.WorkspaceTarget(run_id="run_up"))
            yield tpb.UploadWorkspaceRequest(data=_tar("a.txt", b"uploaded"))

        # without the token the server answers UNAUTHENTICATED; with the tenant missing the
        # archive would land in the default tenant's workspace
        done = await stub.UploadWorkspace(chunks())
        assert done.files == 1
        landed = Path(config.resolved_workspace_root) / "acme" / "runs" / "run_up" / "a.txt"
        assert landed.read_bytes() == b"uploaded"
    finally:
        await channel.close()


def test_addresses_become_dns_targets_and_explicit_resolvers_stay():
    from agentrt.client.channels import grpc_target

    assert grpc_target("agentrt-sessions:50054") == "dns:///agentrt-sessions:50054"
    assert grpc_target("127.0.0.1:50054") == "dns:///127.0.0.1:50054"
    assert grpc_target("[::1]:50054") == "dns:///[::1]:50054"
    for kept in ("dns://10.0.0.10:53/sessions:50054", "ipv4:127.0.0.1:1,127.0.0.2:1", "unix:/tmp/s.sock"):
        assert grpc_target(kept) == kept


def test_only_calls_safe_to_send_twice_are_retried():
    import json

    from agentrt.client.channels import service_config

    config = json.loads(service_config())
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    retried = {(n["service"], n["method"]) for n in config["methodConfig"][0]["name"]}
    assert ("agentrt.v1.SessionService", "GetContext") in retried
    assert ("agentrt.v1.ToolService", "ExecuteTool") in retried
    for unsafe in (
        ("agentrt.v1.RunService", "StartRun"),
        ("agentrt.v1.SessionService", "CreateSession"),
        ("agentrt.v1.SessionService", "AppendEntries"),
        ("agentrt.v1.ModelGatewayService", "Generate"),
        ("agentrt.v1.ModelGatewayService", "StreamGenerate"),
    ):
        assert unsafe not in retried
    assert config["methodConfig"][0]["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert "waitForReady" not in config["methodConfig"][0]
    waiting = json.loads(service_config(wait_for_ready=True))["methodConfig"]
    assert all(m["waitForReady"] for m in waiting)
    # the run loop's channels (fenced=True) add its fenced writes, never a model call
    fenced = json.loads(service_config(wait_for_ready=True, fenced=True))["methodConfig"][0]
    fenced_names = {(n["service"], n["method"]) for n in fenced["name"]}
    assert ("agentrt.v1.SessionService", "AppendEntries") in fenced_names
    assert ("agentrt.v1.ModelGatewayService", "Generate") not in fenced_names
    assert ("agentrt.v1.ModelGatewayService", "StreamGenerate") not in fenced_names
    assert ("agentrt.v1.SessionService", "CreateSession") not in fenced_names


async def test_wait_for_ready_waits_for_a_replica_that_comes_up(start_server, tmp_path):
    """With wait_for_ready a call sent before any replica listens is served once one does."""
    import asyncio

    from tests.ports import free_ports

    port = free_ports(1)[0]
    config = SessionsConfig(server=ServerConfig(port=port, db_url=sqlite_url(str(tmp_path), "s")))
    patient = open_channel(f"127.0.0.1:{port}", wait_for_ready=True)
    hasty = open_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.SessionServiceStub(hasty).ListSessions(pb.ListSessionsRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        call = asyncio.ensure_future(
            pb_grpc.SessionServiceStub(patient).CreateSession(
                pb.CreateSessionRequest(session_id="w"), timeout=60
            )
        )
        await asyncio.sleep(0)  # the call is pending on a channel with nothing to connect to
        assert not call.done()
        await start_server(build_server(config))
        assert (await call).session.session_id == "w"
    finally:
        await patient.close()
        await hasty.close()
