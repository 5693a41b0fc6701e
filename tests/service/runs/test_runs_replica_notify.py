"""Two RunService replicas on one PostgreSQL database: a stream on B follows a run on A
through LISTEN/NOTIFY alone, and survives B's LISTEN connection being killed (decision 0011)."""

from __future__ import annotations

import asyncio

import asyncpg
import grpc
import pytest

from agentrt.mesh.config import ServerConfig
from agentrt.runs.config import RunsConfig
from agentrt.runs.events.notify import libpq_dsn
from agentrt.runs.server import build_server as build_runs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply
from tests.service.runs.harness import WAIT_S, agent, start_mesh

pytestmark = pytest.mark.postgres


async def test_a_stream_on_b_survives_its_listen_connection_dying(start_server, tmp_path, emulator):
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True, replica_id="a")
    url = mesh.runs_server.config.db_url
    replica_b = build_runs(
        RunsConfig(
            server=ServerConfig(port=0, db_url=url, state_dir=mesh.tmp),
            gateway_address=mesh.addresses["gateway"],
            tools_address=mesh.addresses["tools"],
            sessions_address=mesh.addresses["sessions"],
            tasks_address="",
            replica_id="b",
        )
    )
    stub_b = pb_grpc.RunServiceStub(grpc.aio.insecure_channel(await start_server(replica_b)))
    assert replica_b.manager.poll_seconds is None  # no poll interval on PostgreSQL
    listener = replica_b.listener
    assert listener.listening

    # A slow answer: the stream on B is open while A is still writing.
    emulator.script([Reply(text="x" * 120, chunk_chars=2, event_delay=0.01)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    call = stub_b.StreamRunEvents(pb.StreamRunEventsRequest(run_id=started.run_id), timeout=WAIT_S)
    first = await call.read()
    assert first.event.seq == 1

    # B loses its LISTEN connection (a PostgreSQL restart, a network cut): it reconnects and
    # every stream re-reads storage, so nothing notified meanwhile is lost.
    admin = await asyncpg.connect(libpq_dsn(url))
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", listener._conn.get_server_pid())
    finally:
        await admin.close()

    events = [first.event]
    while events[-1].WhichOneof("payload") != "stream_end":
        events.append((await call.read()).event)
    kinds = [e.WhichOneof("payload") for e in events]
    assert "gap" not in kinds and kinds[-1] == "stream_end"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED

    async def relistening() -> None:
        while not listener.listening:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(relistening(), WAIT_S)
    assert listener.received > 0
