"""The mesh for RunService tests: the four production servers in-process on 127.0.0.1:0.

Helpers live here (one module object however it is imported); conftest.py only exposes the
fixtures.

Sessions, tools, gateway and runs are each built by their own `build_server()` with
SQLite files and a workspace root under tmp_path; the gateway's OpenAI and Anthropic
providers point at the wire emulator. Tests talk to RunService (and read the session
store) over real channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from agentrt.gateway.config import GatewayConfig, ProviderSettings
from agentrt.gateway.server import build_server as build_gateway
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.local_calls import LocalCalls
from agentrt.mesh.storage.db import Database, sqlite_url
from agentrt.runs.config import RunsConfig
from agentrt.runs.server import build_server as build_runs
from agentrt.runs.storage.store import RunStore
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server as build_sessions
from agentrt.tools.config import ToolsConfig
from agentrt.tools.server import build_server as build_tools
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from tests.emulators.providers import ProviderEmulator

#: Upper bound on waiting for a run to reach a state, seconds (a bound, not a sleep).
WAIT_S = 30.0
#: Set to a PostgreSQL server URL (postgresql+asyncpg://user@host:port) to run RunService's
#: own tables on PostgreSQL: each mesh gets a fresh database there, dropped afterwards.
PG_ENV = "AGENTRT_TEST_RUNS_PG"
_PG_DATABASES: list[str] = []


async def drop_pg_databases() -> None:
    """Drop the databases fresh_pg_database created."""
    server = os.environ.get(PG_ENV, "") or pg_server()
    if not _PG_DATABASES:
        return
    import asyncpg

    conn = await asyncpg.connect(server.replace("postgresql+asyncpg", "postgresql") + "/postgres")
    try:
        while _PG_DATABASES:
            await conn.execute(f'DROP DATABASE IF EXISTS "{_PG_DATABASES.pop()}" WITH (FORCE)')
    finally:
        await conn.close()


async def fresh_pg_database(server: str, prefix: str) -> str:
    """Create an empty database on server (postgresql+asyncpg://user@host:port); return its URL."""
    import uuid

    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server.replace("postgresql+asyncpg", "postgresql") + "/postgres")
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    _PG_DATABASES.append(name)
    return f"{server}/{name}"


def pg_server() -> str:
    """The PostgreSQL server the tests use (tests/stores.py), as a URL without a database."""
    from tests.stores import PG_HOST

    return f"postgresql+asyncpg://postgres@{PG_HOST}"


async def runs_db_url(tmp: str, pg: bool = False) -> str:
    server = pg_server() if pg else os.environ.get(PG_ENV, "")
    if not server:
        return sqlite_url(tmp, "runs")
    return await fresh_pg_database(server, "runs_test")


async def require_pg() -> None:
    """Skip (or fail under CI) when the test PostgreSQL does not answer."""
    from tests.needs import unavailable
    from tests.stores import pg_reachable

    if not await pg_reachable():
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")


#: The run store's backends, as a fixture's params ("sqlite", "postgres").
STORE_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextlib.asynccontextmanager
async def open_run_store(backend: str, tmp: str, prefix: str) -> AsyncIterator[RunStore]:
    """Yield a RunStore with its tables on a fresh SQLite file or PostgreSQL database (prefix names it)."""
    if backend == "postgres":
        await require_pg()
        url = await fresh_pg_database(pg_server(), prefix)
    else:
        url = sqlite_url(tmp, "runs")
    db = Database(url)
    runs = RunStore(db, replica="test")
    await runs.create_tables()
    try:
        yield runs
    finally:
        await db.close()


@dataclass
class Mesh:
    runs: pb_grpc.RunServiceStub
    sessions: spb_grpc.SessionServiceStub
    emu: ProviderEmulator
    workspace_root: str
    runs_address: str
    runs_server: object
    addresses: dict[str, str]
    tmp: str
    work: str = ""
    tools_server: object = None
    tools_config: object = None

    async def events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None, until: str = ""
    ) -> list[pb.RunEvent]:
        """Read the run's stream to its end (or `limit` events, or the first `until` event),
        bounded by WAIT_S."""
        out: list[pb.RunEvent] = []

        async def read() -> None:
            call = self.runs.StreamRunEvents(pb.StreamRunEventsRequest(run_id=run_id, after_seq=after_seq))
            async for msg in call:
                out.append(msg.event)
                if (limit is not None and len(out) >= limit) or msg.event.WhichOneof("payload") == until:
                    call.cancel()
                    return

        await asyncio.wait_for(read(), WAIT_S)
        return out

    async def wait_status(self, run_id: str, *statuses: int) -> pb.Run:
        """Poll GetRun until the run is in one of statuses (bounded by WAIT_S)."""

        async def poll() -> pb.Run:
            while True:
                run = (await self.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
                if run.status in statuses:
                    return run
                await asyncio.sleep(0.02)

        return await asyncio.wait_for(poll(), WAIT_S)

    async def entries(self, session_id: str) -> list[spb.Entry]:
        resp = await self.sessions.ListEntries(
            spb.ListEntriesRequest(session=spb.SessionRef(session_id=session_id))
        )
        return list(resp.entries)


def agent(provider: str = "openai", **kw: object) -> pb.AgentSpec:
    """An inline agent on the emulator's model.

    Without `tools` it asks for the default tools (`default_tools`), as every agent got them
    before issue 11; pass `tools=[]` for an agent with no tools.
    """
    if "tools" not in kw:
        kw.setdefault("default_tools", True)
    model = {"openai": "gpt-test", "anthropic": "claude-test", "openai-chat": "gpt-test"}[provider]
    return pb.AgentSpec(model=cpb.ModelRef(provider=provider, model=model), **kw)  # type: ignore[arg-type]


async def start_mesh(
    start_server,
    tmp_path,
    emu: ProviderEmulator,
    *,
    pg: bool = False,
    tasks_address: str = "",
    tools_kw: dict[str, object] | None = None,
    local: bool = False,
    **runs_kw: object,
) -> Mesh:
    """Start sessions, tools, gateway and runs; with pg, runs and sessions on fresh PostgreSQL databases.

    tasks_address is the TaskService the tool service's task tools call ("" = none);
    tools_kw are further ToolsConfig fields (a test's own docker owner label, say).
    With local, the runs service calls the other three in this process without the wire
    (mesh/local_calls.py, as `agentrt serve all` does).
    """
    tmp = str(tmp_path / "state")
    os.makedirs(tmp, exist_ok=True)
    if pg:
        await require_pg()
    sessions_db = await fresh_pg_database(pg_server(), "sessions_test") if pg else sqlite_url(tmp, "sessions")
    sessions_server = build_sessions(
        SessionsConfig(server=ServerConfig(port=0, db_url=sessions_db, state_dir=tmp))
    )
    sessions = await start_server(sessions_server)
    workspace_root = str(tmp_path / "workspaces")
    os.makedirs(tmp_path / "work", exist_ok=True)
    tools_config = ToolsConfig(
        server=ServerConfig(port=0, db_url=sqlite_url(tmp, "tools"), state_dir=tmp),
        workspace_root=workspace_root,
        heartbeat_seconds=0.5,
        tasks_address=tasks_address,
        **(tools_kw or {}),  # type: ignore[arg-type]
    )
    tools_server = build_tools(tools_config)
    tools = await start_server(tools_server)
    remote = {"api_key": "test-key", "enabled": True}
    gateway_server = build_gateway(
        GatewayConfig(
            server=ServerConfig(port=0),
            openai=ProviderSettings(base_url=emu.base_url + "/v1", default_model="gpt-test", **remote),
            openai_chat=ProviderSettings(base_url=emu.base_url + "/v1", default_model="gpt-test", **remote),
            anthropic=ProviderSettings(base_url=emu.base_url, default_model="claude-test", **remote),
            max_retries=1,
            initial_backoff_seconds=0.01,
            max_backoff_seconds=0.02,
            max_retry_after_seconds=0.05,
        )
    )
    gateway = await start_server(gateway_server)
    hosted = None
    if local:
        hosted = LocalCalls()
        peers = {"sessions": sessions_server, "tools": tools_server, "gateway": gateway_server}
        for peer, server in peers.items():
            hosted.host_server(peer, server)
    addresses = {"gateway": gateway, "tools": tools, "sessions": sessions}
    runs_config = RunsConfig(
        server=ServerConfig(port=0, db_url=await runs_db_url(tmp, pg), state_dir=tmp),
        gateway_address=gateway,
        tools_address=tools,
        sessions_address=sessions,
        tasks_address="",
        default_model="openai:gpt-test",
        **runs_kw,  # type: ignore[arg-type]
    )
    runs_server = build_runs(runs_config, local=hosted)
    runs = await start_server(runs_server)
    channel = grpc.aio.insecure_channel(runs)
    schannel = grpc.aio.insecure_channel(sessions)
    return Mesh(
        runs=pb_grpc.RunServiceStub(channel),
        sessions=spb_grpc.SessionServiceStub(schannel),
        emu=emu,
        workspace_root=workspace_root,
        runs_address=runs,
        runs_server=runs_server,
        addresses=addresses,
        tmp=tmp,
        work=str(tmp_path / "work"),
        tools_server=tools_server,
        tools_config=tools_config,
    )


async def start_replica(mesh: Mesh, start_server, replica_id: str = "replica-b", **runs_kw: object):
    """Start another runs replica on mesh's run store and peers; return (its server, a stub on it).

    runs_kw are further RunsConfig fields, or other values of the mesh's peer addresses; the lease
    is 0.6 s unless given.
    """
    fields: dict[str, object] = {
        "gateway_address": mesh.addresses["gateway"],
        "tools_address": mesh.addresses["tools"],
        "sessions_address": mesh.addresses["sessions"],
        "tasks_address": "",
        "lease_seconds": 0.6,
        **runs_kw,
    }
    replica = build_runs(
        RunsConfig(
            server=ServerConfig(port=0, db_url=mesh.runs_server.config.db_url, state_dir=mesh.tmp),
            replica_id=replica_id,
            **fields,  # type: ignore[arg-type]
        )
    )
    address = await start_server(replica)
    return replica, pb_grpc.RunServiceStub(grpc.aio.insecure_channel(address))
