"""SessionService's series on its /metrics port: appends by outcome, entries written, watchers.

The production server on SQLite, its /metrics scraped over HTTP after real calls.
"""

from __future__ import annotations

import asyncio
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sessions_helpers import append, new_session, ref, user

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.storage.db import sqlite_url
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.ports import free_port


def _scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_appends_are_counted_by_outcome_and_watchers_while_open(start_server, tmp_path):
    port = free_port()
    config = SessionsConfig(
        server=ServerConfig(port=0, db_url=sqlite_url(str(tmp_path), "s"), metrics_port=port)
    )
    address = await start_server(build_server(config))
    channel = open_channel(address)
    stub = pb_grpc.SessionServiceStub(channel)
    try:
        await new_session(stub, "s")
        await append(stub, "s", user("a"), user("b"), expected_last_seq=0)
        with pytest.raises(grpc.aio.AioRpcError) as lost:
            await append(stub, "s", user("stale"), expected_last_seq=0)
        assert lost.value.code() == grpc.StatusCode.ABORTED
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await append(stub, "s")  # no entries
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        watch = stub.WatchSession(pb.WatchSessionRequest(session=ref("s")))
        first = await watch.read()
        assert first.entry.seq == 1
        samples = await asyncio.to_thread(_scrape, port)
        watch.cancel()
    finally:
        await channel.close()

    def value(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    assert value("agentrt_sessions_appends_total", outcome="ok") == 1
    assert value("agentrt_sessions_appends_total", outcome="seq_mismatch") == 1
    assert value("agentrt_sessions_appends_total", outcome="refused") == 1
    assert value("agentrt_sessions_entries_appended_total") == 2
    assert value("agentrt_sessions_watchers") == 1
    ok = ("agentrt_rpc_server_requests_total", "agentrt.v1.SessionService", "AppendEntries", "OK")
    assert value(ok[0], service=ok[1], method=ok[2], code=ok[3]) == 1
