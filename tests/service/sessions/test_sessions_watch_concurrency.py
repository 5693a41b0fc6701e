"""WatchSession tails, and concurrent writers on one session (004 §2.5e2 "one step")."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from sessions_helpers import append, new_session, ref, text_of, user

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_of
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc

BOUND = 15.0  # seconds: the most a test waits for a state before failing


async def next_text(stream) -> str:
    msg = await asyncio.wait_for(stream.read(), BOUND)
    return text_of(msg.entry)


async def replica(env, start_server) -> pb_grpc.SessionServiceStub:
    """Start a second SessionService on the same database, as another replica would."""
    config = SessionsConfig(server=ServerConfig(port=0, db_url=env.db_url), watch_poll_seconds=0.1)
    address = await start_server(build_server(config))
    channel = open_channel(address, tenant=env.tenant)
    env.channels.append(channel)
    return pb_grpc.SessionServiceStub(channel)


async def test_watch_delivers_stored_then_live_entries_and_ends_on_delete(env):
    await new_session(env.stub, "s")
    first = await append(env.stub, "s", user("one"), user("two"), user("three"))
    stream = env.watch(pb.WatchSessionRequest(session=ref("s"), after_seq=first[0].seq))
    assert [await next_text(stream), await next_text(stream)] == ["two", "three"]
    await append(env.stub, "s", user("four"))
    assert await next_text(stream) == "four"
    await append(env.stub, "s", user("five"), user("six"))
    assert [await next_text(stream), await next_text(stream)] == ["five", "six"]
    await env.stub.DeleteSession(pb.DeleteSessionRequest(session=ref("s")))
    end = await asyncio.wait_for(stream.read(), BOUND)
    assert end is grpc.aio.EOF


async def test_watch_sees_appends_made_by_another_replica(env, start_server):
    other = await replica(env, start_server)
    await new_session(env.stub, "s")
    stream = env.watch(pb.WatchSessionRequest(session=ref("s")))
    await append(other, "s", user("from the other replica"))
    assert await next_text(stream) == "from the other replica"
    stream.cancel()


async def test_watch_of_unknown_session_is_not_found(env):
    stream = env.watch(pb.WatchSessionRequest(session=ref("nope")))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(stream.read(), BOUND)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and reason_of(info.value) == "SESSION_NOT_FOUND"


async def _hammer(stubs, session_id: str, writers: int, per_writer: int) -> list[pb.Entry]:
    async def writer(w: int) -> list[pb.Entry]:
        out = []
        for i in range(per_writer):
            out += await append(stubs[w % len(stubs)], session_id, user(f"{w}:{i}"))
        return out

    results = await asyncio.gather(*(writer(w) for w in range(writers)))
    return [e for batch in results for e in batch]


async def _assert_one_chain(
    stub, session_id: str, stored: list[pb.Entry], writers: int, per_writer: int
) -> None:
    total = writers * per_writer
    assert len({e.seq for e in stored}) == total
    assert len({e.entry_id for e in stored}) == total
    log = list((await stub.ListEntries(pb.ListEntriesRequest(session=ref(session_id)))).entries)
    assert len(log) == total
    # One linear chain: each entry's parent is the entry stored just before it.
    assert log[0].parent_id == ""
    assert all(log[i].parent_id == log[i - 1].entry_id for i in range(1, len(log)))
    view = (await stub.GetContext(pb.GetContextRequest(session=ref(session_id)))).entries
    assert len(view) == total
    for w in range(writers):
        mine = [text_of(e) for e in log if text_of(e).startswith(f"{w}:")]
        assert mine == [f"{w}:{i}" for i in range(per_writer)]


async def test_eight_writers_never_share_a_seq_nor_fork_the_branch(env):
    """8 concurrent writers x 200 appends on one session: 1,600 distinct seqs, one chain."""
    await new_session(env.stub, "hot")
    stored = await _hammer([env.stub], "hot", 8, 200)
    await _assert_one_chain(env.stub, "hot", stored, 8, 200)


async def test_writers_on_two_replicas_never_fork_the_branch(env, start_server):
    """The same guarantee when the writers go through two server processes' worth of state."""
    other = await replica(env, start_server)
    await new_session(env.stub, "hot")
    stored = await _hammer([env.stub, other], "hot", 8, 25)
    await _assert_one_chain(env.stub, "hot", stored, 8, 25)
