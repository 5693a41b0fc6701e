"""Several real session-service processes behind one DNS name: the mesh's channels balance
over them, survive losing one, and find one added later.

Each replica is `agentrt serve sessions` on its own loopback address (127.0.0.2, .3, .4, and
later .5), all on the same port, each with its own SQLite database, so a replica's database
says which calls it served. A DNS server in the test (dnslib) answers the name
`sessions.agentrt.test` with the replicas' addresses; the channel is the production
`open_channel` with the target `dns://<that server>/sessions.agentrt.test:<port>`, the
same c-ares resolver a `dns:///` target uses with the system's server.

- round_robin: 30 CreateSession calls through one channel land on all three replicas
  (pick_first, gRPC's default, would put all 30 on one);
- retryPolicy: ListSessions calls in flight while one replica is killed with SIGKILL are
  retried on another; not one fails; the calls after it go to the two left;
- re-resolution: a fourth replica added to the DNS answer receives calls once the servers'
  connection age (AGENTRT_MAX_CONNECTION_AGE_SECONDS=2) sends GOAWAY and the channel
  resolves the name again.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from dnslib import QTYPE, RR, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer
from e2e_helpers import STATE_TIMEOUT
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.cli.ports import port_taken
from agentrt.client.channels import open_channel
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.slow

NAME = "sessions.agentrt.test"
HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


class Zone(BaseResolver):
    """Answers A queries for NAME with the current replica addresses (TTL 1 s)."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def resolve(self, request, handler):  # type: ignore[no-untyped-def]
        reply = request.reply()
        question = request.q
        if str(question.qname).rstrip(".") == NAME and question.qtype == QTYPE.A:
            for address in list(self.addresses):
                reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(address), ttl=1))
        return reply


def _shared_port() -> int:
    for _ in range(200):
        port = random.randint(20000, 40000)
        if not any(port_taken(host, port) for host in HOSTS):
            return port
    raise RuntimeError("no port free on every replica address")


def _start_replica(tmp_path: Path, host: str, port: int) -> subprocess.Popen:
    state = tmp_path / host
    state.mkdir()
    env = {
        **os.environ,
        "AGENTRT_STATE_DIR": str(state),
        "AGENTRT_MAX_CONNECTION_AGE_SECONDS": "2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "agentrt.cli.main", "serve", "sessions", "--host", host, "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(state / "stderr.txt", "wb"),  # noqa: SIM115 - closed with the process
        env=env,
        cwd=state,
    )


async def _until(predicate, what: str):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + STATE_TIMEOUT
    while True:
        value = await predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _serving(address: str) -> bool:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=2
            )
        except grpc.aio.AioRpcError:
            return False
    return answer.status == health_pb2.HealthCheckResponse.SERVING


async def _held(address: str) -> set[str]:
    """The session ids a replica's own database holds (asked on a direct channel)."""
    async with grpc.aio.insecure_channel(address) as channel:
        listed = await pb_grpc.SessionServiceStub(channel).ListSessions(
            pb.ListSessionsRequest(page_size=1000), timeout=10
        )
    return {s.session_id for s in listed.sessions}


async def test_one_name_many_replicas_balanced_retried_and_rediscovered(tmp_path):
    zone = Zone()
    dns = DNSServer(zone, port=0, address="127.0.0.1", logger=DNSLogger("-request,-reply,-truncated,-error"))
    dns.start_thread()
    port = _shared_port()
    replicas: dict[str, subprocess.Popen] = {}
    channel = None
    try:
        for host in HOSTS[:3]:
            replicas[host] = _start_replica(tmp_path, host, port)
        for host in HOSTS[:3]:
            await _until(lambda h=host: _serving(f"{h}:{port}"), f"replica {host} SERVING")
        zone.addresses = list(HOSTS[:3])
        dns_port = dns.server.server_address[1]
        channel = open_channel(
            f"dns://127.0.0.1:{dns_port}/{NAME}:{port}",
            options=[("grpc.dns_min_time_between_resolutions_ms", 500)],
        )
        stub = pb_grpc.SessionServiceStub(channel)

        # round_robin: every replica gets a share of one channel's calls.
        for i in range(30):
            await stub.CreateSession(pb.CreateSessionRequest(session_id=f"a{i}"), timeout=10)
        held = {host: await _held(f"{host}:{port}") for host in HOSTS[:3]}
        assert set().union(*held.values()) == {f"a{i}" for i in range(30)}
        assert sum(len(ids) for ids in held.values()) == 30
        assert all(len(ids) >= 3 for ids in held.values()), {h: len(ids) for h, ids in held.items()}

        # retryPolicy: reads in flight while a replica dies are retried elsewhere; none fails.
        victim = HOSTS[1]
        answered = 0

        async def reader() -> None:
            nonlocal answered
            for _ in range(40):
                await stub.ListSessions(pb.ListSessionsRequest(), timeout=10)
                answered += 1

        readers = asyncio.gather(*(reader() for _ in range(8)))
        await _until(lambda: asyncio.sleep(0, result=answered >= 60), "the first reads answered")
        replicas[victim].send_signal(signal.SIGKILL)
        replicas[victim].wait(timeout=30)
        await readers
        assert answered == 320
        for i in range(20):
            await stub.CreateSession(pb.CreateSessionRequest(session_id=f"b{i}"), timeout=10)
        survivors = [h for h in HOSTS[:3] if h != victim]
        after = set().union(*[await _held(f"{h}:{port}") for h in survivors])
        assert {f"b{i}" for i in range(20)} <= after

        # Re-resolution: a replica added behind the name is found without reopening the channel.
        newcomer = HOSTS[3]
        replicas[newcomer] = _start_replica(tmp_path, newcomer, port)
        await _until(lambda: _serving(f"{newcomer}:{port}"), "the fourth replica SERVING")
        zone.addresses = [*survivors, newcomer]
        created = 0

        async def newcomer_served() -> bool:
            nonlocal created
            await stub.CreateSession(pb.CreateSessionRequest(session_id=f"c{created}"), timeout=10)
            created += 1
            return bool(await _held(f"{newcomer}:{port}"))

        await _until(newcomer_served, "a call served by the replica added to the DNS answer")
    finally:
        if channel is not None:
            await channel.close()
        for proc in replicas.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in replicas.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        dns.stop()
