"""open_channel sends the bearer token and tenant on unary AND server-streaming calls."""

from __future__ import annotations

import grpc
import pytest

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.db import sqlite_url
from agentrt.mesh.status import reason_of
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc


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
    finally:
        await mine.close()
        await other.close()
