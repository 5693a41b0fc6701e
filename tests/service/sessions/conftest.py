"""The SessionService conformance suite's fixtures: one suite, two backends.

Every test runs against SQLite (a fresh file) and PostgreSQL (the `test` database on
127.0.0.1:5432, marked `postgres`). Tests on PostgreSQL share the store's tables and are
isolated by a tenant of their own, which is also what the service guarantees between
tenants; nothing is dropped, so other users of the database are never disturbed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sessions_helpers import BACKENDS, PG_URL, Env, pg_reachable

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.storage.db import sqlite_url
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.needs import unavailable


@pytest.fixture(params=BACKENDS)
async def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """The database URL of the backend under test."""
    if request.param == "sqlite":
        return sqlite_url(str(tmp_path), "sessions")
    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    return PG_URL


@pytest.fixture
async def env(start_server, db_url: str) -> AsyncIterator[Env]:
    """Start the production SessionService on 127.0.0.1:0 and open a tenant-scoped channel."""
    config = SessionsConfig(server=ServerConfig(port=0, db_url=db_url), watch_poll_seconds=0.2)
    address = await start_server(build_server(config))
    tenant = "t-" + uuid.uuid4().hex[:20]
    channel = open_channel(address, tenant=tenant)
    e = Env(address, tenant, pb_grpc.SessionServiceStub(channel), db_url, [channel])
    yield e
    for ch in e.channels:
        await ch.close()
