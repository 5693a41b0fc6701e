"""AppendEntries while every backend of the sessions database is terminated (decision 0059).

Every answer must be OK or UNAVAILABLE (never INTERNAL), and once the terminations stop the
service must serve every append (no broken connection handed out again).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import asyncpg
import grpc
import pytest
from sessions_helpers import new_session, pg_reachable, user

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.storage.db import Database
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.needs import unavailable
from tests.service.runs.harness import fresh_pg_database, pg_server

pytestmark = pytest.mark.postgres

CHAOS_S = 6.0


async def test_appends_while_backends_are_terminated_answer_ok_or_unavailable(start_server, monkeypatch):
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    # watch the driver connections: one whose statement broke must not be handed out again
    broken: list[object] = []  # held, so that no new connection can take a dropped one's id
    reused: list[str] = []
    original = Database.driver

    @contextlib.asynccontextmanager
    async def watched(self):
        async with original(self) as conn:
            if any(conn is b for b in broken):
                reused.append(f"conn {id(conn)} handed out again after a client-side failure")
            try:
                yield conn
            except asyncpg.InternalClientError:
                broken.append(conn)
                raise

    monkeypatch.setattr(Database, "driver", watched)
    url = await fresh_pg_database(pg_server(), "sessions_breaker")
    db_name = url.rsplit("/", 1)[1]
    address = await start_server(build_server(SessionsConfig(server=ServerConfig(port=0, db_url=url))))
    channel = open_channel(address, tenant="t-" + uuid.uuid4().hex[:20])
    stub = pb_grpc.SessionServiceStub(channel)
    admin = await asyncpg.connect(pg_server().replace("postgresql+asyncpg", "postgresql") + "/postgres")
    sessions = [(await new_session(stub)).session_id for _ in range(4)]
    done = asyncio.Event()
    answers: dict[str, int] = {}
    internal: list[str] = []

    async def killer() -> None:
        while not done.is_set():
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db_name
            )
            await asyncio.sleep(0.02)

    async def appender(session_id: str) -> None:
        i = 0
        while not done.is_set():
            req = pb.AppendEntriesRequest(
                session=pb.SessionRef(session_id=session_id), entries=[user(f"{session_id}-{i}")]
            )
            i += 1
            try:
                await stub.AppendEntries(req)
                answers["OK"] = answers.get("OK", 0) + 1
            except grpc.aio.AioRpcError as e:
                answers[e.code().name] = answers.get(e.code().name, 0) + 1
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    internal.append(f"{e.code().name}: {e.details()}")

    tasks = [asyncio.create_task(killer()), *(asyncio.create_task(appender(s)) for s in sessions)]
    await asyncio.sleep(CHAOS_S)
    done.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await admin.close()
    # the terminations stopped: every append now succeeds
    await asyncio.sleep(0.5)
    after: list[str] = []
    started = time.monotonic()
    for i in range(40):
        try:
            await stub.AppendEntries(
                pb.AppendEntriesRequest(
                    session=pb.SessionRef(session_id=sessions[0]), entries=[user(f"after-{i}")]
                )
            )
        except grpc.aio.AioRpcError as e:
            after.append(f"{e.code().name}: {e.details()}")
    await channel.close()
    print("ANSWERS", answers, "after", after, f"{time.monotonic() - started:.2f}s", "reused", len(reused))
    assert not internal and not after and not reused, (answers, internal[:5], after[:5], reused[:3])
