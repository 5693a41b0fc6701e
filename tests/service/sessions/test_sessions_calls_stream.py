"""AppendEntriesCalls: AppendEntries calls over one long-lived stream (mesh/calls.py, client/calls.py).

On both backends: a call over the stream answers exactly what the same AppendEntries RPC
answers (the stored entries, the tail, SEQ_MISMATCH with its reason), the stream's tenant
scopes every call on it, and its calls are counted as AppendEntries RPCs in the service's
metrics.
"""

from __future__ import annotations

import grpc
import pytest
from sessions_helpers import Env

from agentrt.client.calls import CallStream
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import TENANT_HEADER
from agentrt.runs.peers.streams import _append_request, _append_split
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb


def _user(text: str) -> pb.Entry:
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    return pb.Entry(kind="item", item=pb.Item(message=msg))


def _stream(env: Env, tenant: str | None = None) -> CallStream:
    metadata = [(TENANT_HEADER, tenant or env.tenant)]
    return CallStream(lambda: env.stub.AppendEntriesCalls(metadata=metadata), _append_request, _append_split)


async def _session(env: Env) -> str:
    return (await env.stub.CreateSession(pb.CreateSessionRequest())).session.session_id


async def test_appends_answer_as_the_rpc_with_the_tail(env: Env):
    sid = await _session(env)
    ref = pb.SessionRef(session_id=sid)
    calls = _stream(env)
    first = await calls.call(
        pb.AppendEntriesRequest(session=ref, entries=[_user("a")], expected_last_seq=0, include_tail=True),
        timeout=30,
    )
    assert [e.seq for e in first.entries] == [1] and first.tail_last_seq == 1
    await env.stub.AppendEntries(pb.AppendEntriesRequest(session=ref, entries=[_user("foreign")]))
    second = await calls.call(
        pb.AppendEntriesRequest(session=ref, entries=[_user("b")], include_tail=True), timeout=30
    )
    assert [e.seq for e in second.entries] == [3] and second.tail_last_seq == 3
    listed = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref))
    assert [e.item.message.content[0].text.text for e in listed.entries] == ["a", "foreign", "b"]
    assert calls.opened == 1
    calls.close()


async def test_a_lost_fence_is_seq_mismatch_as_over_the_rpc(env: Env):
    sid = await _session(env)
    ref = pb.SessionRef(session_id=sid)
    calls = _stream(env)
    fresh = pb.AppendEntriesRequest(session=ref, entries=[_user("a")], expected_last_seq=0)
    await calls.call(fresh, timeout=30)
    stale = pb.AppendEntriesRequest(session=ref, entries=[_user("b")], expected_last_seq=0)
    with pytest.raises(MeshError) as over_stream:
        await calls.call(stale, timeout=30)
    with pytest.raises(grpc.aio.AioRpcError) as over_rpc:
        await env.stub.AppendEntries(stale)
    assert over_stream.value.status == Status.ABORTED and over_rpc.value.code() == grpc.StatusCode.ABORTED
    assert over_stream.value.reason == Reason.SEQ_MISMATCH
    listed = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref))
    assert len(listed.entries) == 1  # the refused calls changed nothing
    calls.close()


async def test_the_streams_tenant_scopes_its_calls(env: Env):
    sid = await _session(env)
    other = _stream(env, tenant=env.tenant + "-other")
    with pytest.raises(MeshError) as refused:
        await other.call(
            pb.AppendEntriesRequest(session=pb.SessionRef(session_id=sid), entries=[_user("x")]), timeout=30
        )
    assert refused.value.status == Status.NOT_FOUND
    other.close()


async def test_bad_input_over_the_stream_is_refused_and_changes_nothing(env: Env):
    sid = await _session(env)
    ref = pb.SessionRef(session_id=sid)
    calls = _stream(env)
    with pytest.raises(MeshError) as refused:
        await calls.call(pb.AppendEntriesRequest(session=ref), timeout=30)  # no entries
    assert refused.value.status == Status.INVALID_ARGUMENT and refused.value.reason == Reason.MISSING_FIELD
    ok = await calls.call(pb.AppendEntriesRequest(session=ref, entries=[_user("fine")]), timeout=30)
    assert [e.seq for e in ok.entries] == [1]
    calls.close()


async def test_its_calls_are_counted_as_append_entries_rpcs(start_server, tmp_path):
    import socket
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from agentrt.client.channels import open_channel
    from agentrt.mesh.config import ServerConfig
    from agentrt.mesh.storage.db import sqlite_url
    from agentrt.sessions.config import SessionsConfig
    from agentrt.sessions.server import build_server
    from agentrt.v1 import session_service_pb2_grpc as pb_grpc

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = ServerConfig(port=0, db_url=sqlite_url(str(tmp_path), "s"), metrics_port=port)
    config = SessionsConfig(server=server)
    address = await start_server(build_server(config))
    channel = open_channel(address)
    try:
        env = Env(address, "default", pb_grpc.SessionServiceStub(channel), "", [])
        sid = await _session(env)
        calls = _stream(env)
        ref = pb.SessionRef(session_id=sid)
        await calls.call(pb.AppendEntriesRequest(session=ref, entries=[_user("a")]), timeout=30)
        with pytest.raises(MeshError):
            await calls.call(pb.AppendEntriesRequest(session=ref), timeout=30)
        calls.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        counted = {
            s.labels["code"]: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "agentrt_rpc_server_requests_total" and s.labels.get("method") == "AppendEntries"
        }
        assert counted == {"OK": 1.0, "INVALID_ARGUMENT": 1.0}
    finally:
        await channel.close()
