"""AppendEntries on PostgreSQL sends its one statement on the pooled driver connection (decision 0059).

The statement skips SQLAlchemy's connection wrapper, so the driver's own exceptions reach the
store: a connection the server ends mid-append must still answer UNAVAILABLE /
DEPENDENCY_UNAVAILABLE (as before, when SQLAlchemy translated them), write nothing, and
leave the server serving the next append; a database that cannot be reached at all is
UNAVAILABLE, not INTERNAL.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import grpc
import pytest
from sessions_helpers import append, assistant, new_session, pg_reachable, ref, user

from agentrt.client.channels import open_channel
from agentrt.core.errors import MeshError, Status
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_of
from agentrt.mesh.storage.db import Database
from agentrt.sessions.codec import entries_in
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.domain import Ref
from agentrt.sessions.server import build_server
from agentrt.sessions.storage.store import SessionStore
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.needs import unavailable
from tests.stores import PG_DSN, PG_URL

pytestmark = pytest.mark.postgres


@pytest.fixture
async def stub(start_server):
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    config = SessionsConfig(server=ServerConfig(port=0, db_url=PG_URL), watch_poll_seconds=0.2)
    address = await start_server(build_server(config))
    channel = open_channel(address, tenant="t-" + uuid.uuid4().hex[:20])
    yield pb_grpc.SessionServiceStub(channel)
    await channel.close()


async def _blocked_by(admin: asyncpg.Connection, holder_pid: int) -> int:
    """The backend waiting on a lock the holder's backend holds (the append, on the session row)."""
    while True:
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", holder_pid
        )
        if pid:
            return int(pid)
        await asyncio.sleep(0.01)


async def test_an_append_whose_connection_the_server_ends_is_unavailable_and_writes_nothing(stub):
    session_id = "drv-" + uuid.uuid4().hex[:12]
    await new_session(stub, session_id)
    await append(stub, session_id, user("first"))
    holder = await asyncpg.connect(PG_DSN)
    admin = await asyncpg.connect(PG_DSN)
    try:
        lock = holder.transaction()
        await lock.start()
        await holder.execute("SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE", session_id)
        pending = asyncio.ensure_future(append(stub, session_id, assistant("lost")))
        pid = await asyncio.wait_for(_blocked_by(admin, holder.get_server_pid()), 10)
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pending
        await lock.rollback()
    finally:
        await holder.close()
        await admin.close()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(err.value) == "DEPENDENCY_UNAVAILABLE"
    # nothing was written, and the server serves the next append on another connection
    stored = await append(stub, session_id, assistant("after"), expected_last_seq=1)
    assert [e.seq for e in stored] == [2]
    entries = (await stub.ListEntries(pb.ListEntriesRequest(session=ref(session_id)))).entries
    assert [e.seq for e in entries] == [1, 2]


async def test_an_append_to_an_unreachable_database_is_unavailable():
    db = Database("postgresql+asyncpg://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(MeshError) as info:
            await SessionStore(db).append("t", Ref("s"), entries_in([user("x")]))
        assert info.value.status == Status.UNAVAILABLE and info.value.reason == "DEPENDENCY_UNAVAILABLE"
    finally:
        await db.close()
