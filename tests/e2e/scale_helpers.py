"""The scaled-out mesh of the issue 13 acceptance and benchmark: every service as replicas.

`ScaledMesh` starts `runs` x3 (by default) and two of every other service, each its own
`agentrt serve <svc>` process on its own loopback address (127.0.1.x, one port per service),
all on fresh PostgreSQL databases, the gateways sharing one input-token budget through the
PostgreSQL limiter. A DNS server in the test (dnslib) answers one name per service,
`<svc>.agentrt.test`, with every replica's address, and every peer address is
`dns://<that server>/<svc>.agentrt.test:<port>`: the production channels (round_robin, retry
policy) balance over the replicas exactly as over a headless Service's pods.

It can kill -9 a replica, SIGTERM it (drain), and start it again on its address with the
same replica id.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from chaos_helpers import create_databases, drop_databases, wait_serving
from dnslib import QTYPE, RR, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from agentrt.cli.ports import port_taken
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply
from tests.ports import free_ports
from tests.stores import PG_DATABASE, PG_HOST

ZONE = "agentrt.test"
SERVICES = ("runs", "gateway", "tools", "sessions", "tasks")
#: Run lease of the replicas, seconds (a dead owner's runs are taken over once it expires).
#: Long enough that a replica starved of CPU and of pool connections under load (eleven
#: processes on two cores, 3 + 2 connections each) still renews in time: a lease lost that way
#: makes the next owner ask the model again for the call in flight (a repeated request).
LEASE_SECONDS = 10.0
#: Limiter window of the gateways, seconds (short, so a test sees several).
LIMITER_WINDOW_SECONDS = 5.0


_TAG = re.compile(r"scale:([a-z0-9-]+)")


def tag_of(body: object) -> str:
    """The run's tag in a model request ("" for a request of no scale run)."""
    found = _TAG.search(json.dumps(body))
    return found.group(1) if found else ""


def turn_of(body: object) -> int:
    """The turn a model request is for: 1 + the tool results it carries."""
    return json.dumps(body).count("function_call_output") + 1


class Responder:
    """The emulator's answers for runs whose input says `scale:<tag>`: turns - 1 tool turns,
    each appending `line-<tag>-<turn>` to lines.txt in the run's workspace (a side effect),
    then the answer."""

    def __init__(self, turns: int, tool_seconds: float = 0.0) -> None:
        self.turns = turns
        self.tool_seconds = tool_seconds

    def __call__(self, path: str, body: object) -> Reply | None:
        tag = tag_of(body)
        if not tag:
            return None
        turn = turn_of(body)
        if turn >= self.turns:
            return Reply(text=f"done {tag}")
        cmd = f"echo line-{tag}-{turn} >> lines.txt"
        if self.tool_seconds:
            cmd += f"; sleep {self.tool_seconds:g}"
        args = json.dumps({"cmd": cmd + f"; echo ok-{turn}"})
        return Reply(text=f"turn {turn}", tool_calls=[ToolCallReply("exec_command", args)])


class Zone(BaseResolver):
    """Answers A queries for `<svc>.agentrt.test` with that service's replica addresses."""

    def __init__(self) -> None:
        self.addresses: dict[str, list[str]] = {}

    def resolve(self, request, handler):  # type: ignore[no-untyped-def]
        reply = request.reply()
        question = request.q
        name = str(question.qname).rstrip(".")
        if question.qtype == QTYPE.A:
            for address in list(self.addresses.get(name, ())):
                reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(address), ttl=1))
        return reply


@dataclass
class Replica:
    """One service process: where it listens, how it was started, its process."""

    service: str
    name: str
    host: str
    port: int
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        """Start the process (no wait)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt.cli.main", "serve", self.service,
             "--host", self.host, "--port", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=open(self.log, "ab"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.log.parent,
            start_new_session=True,
        )  # fmt: skip

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class ScaledMesh:
    """Replicas of every service behind one DNS name each (see the module docstring)."""

    root: Path
    emu: ProviderEmulator
    budget: int
    counts: dict[str, int]
    replicas: dict[str, list[Replica]] = field(default_factory=dict)
    databases: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    zone: Zone = field(default_factory=Zone)
    dns: DNSServer | None = None

    def target(self, service: str) -> str:
        """The gRPC target of a service: every replica, through the test's DNS server."""
        assert self.dns is not None
        dns_port = self.dns.server.server_address[1]
        return f"dns://127.0.0.1:{dns_port}/{service}.{ZONE}:{self.ports[service]}"

    @property
    def runs(self) -> list[Replica]:
        return self.replicas["runs"]

    @property
    def runs_db_url(self) -> str:
        return f"postgresql+asyncpg://postgres@{PG_HOST}/{self.databases[0]}"

    def start(self) -> None:
        """Databases, DNS, then every replica; returns once all serve (call from no event loop)."""
        tag = uuid.uuid4().hex[:10]
        self.databases = [
            f"{PG_DATABASE}_scale_{svc}_{tag}" for svc in ("runs", "sessions", "tools", "tasks")
        ]
        asyncio.run(create_databases(self.databases))
        url = {
            svc: f"postgresql+asyncpg://postgres@{PG_HOST}/{name}"
            for svc, name in zip(("runs", "sessions", "tools", "tasks"), self.databases, strict=True)
        }
        self.dns = DNSServer(
            self.zone, port=0, address="127.0.0.1", logger=DNSLogger("-request,-reply,-truncated,-error")
        )
        self.dns.start_thread()
        hosts: dict[str, list[str]] = {}
        n = 10
        for svc in SERVICES:
            hosts[svc] = [f"127.0.1.{n + i}" for i in range(self.counts.get(svc, 2))]
            n += 10
        every = [h for hs in hosts.values() for h in hs]
        self.ports = dict(zip(SERVICES, _ports_free_on(every, len(SERVICES)), strict=True))
        for svc in SERVICES:
            self.zone.addresses[f"{svc}.{ZONE}"] = hosts[svc]
        (self.root / "workspaces").mkdir(exist_ok=True)
        common = {
            **os.environ,
            "AGENTRT_OPENAI_BASE_URL": self.emu.base_url + "/v1",
            "AGENTRT_OPENAI_API_KEY": "test-key",
            "AGENTRT_GATEWAY_MAX_RETRIES": "0",
            "AGENTRT_LOCAL_MODEL_PATH": str(self.root / "no-local-model.gguf"),
            "AGENTRT_RUNS_DB": url["runs"],
            "AGENTRT_SESSIONS_DB": url["sessions"],
            "AGENTRT_TOOLS_DB": url["tools"],
            "AGENTRT_TASKS_DB": url["tasks"],
            "AGENTRT_LIMITER_BACKEND": "postgres",
            "AGENTRT_LIMITER_URL": url["runs"],
            # the model-call journal every gateway replica shares (beside the limiter's tables)
            "AGENTRT_GATEWAY_JOURNAL_URL": url["runs"],
            "AGENTRT_LIMITER_NAMESPACE": f"scale-{tag}",
            "AGENTRT_LIMITER_TOKENS_PER_MINUTE": str(self.budget),
            "AGENTRT_LIMITER_WINDOW_SECONDS": str(LIMITER_WINDOW_SECONDS),
            "AGENTRT_RUNS_LEASE_SECONDS": str(LEASE_SECONDS),
            "AGENTRT_RUNS_PEER_UNAVAILABLE_SECONDS": "60",
            "AGENTRT_WORKSPACE_ROOT": str(self.root / "workspaces"),
            "AGENTRT_DRAIN_SECONDS": "3",
            # eleven processes share the machine's PostgreSQL (max_connections 100) with others
            "AGENTRT_DB_POOL_SIZE": "3",
            "AGENTRT_DB_MAX_OVERFLOW": "2",
            **{f"AGENTRT_{svc.upper()}_ADDR": self.target(svc) for svc in SERVICES},
        }
        common.pop("AGENTRT_SUPERVISOR_PID", None)
        for svc in SERVICES:
            self.replicas[svc] = []
            for i, host in enumerate(hosts[svc]):
                name = f"{svc}-{i}"
                state = self.root / name
                state.mkdir(exist_ok=True)
                env = {**common, "AGENTRT_STATE_DIR": str(state)}
                if svc == "runs":
                    env["AGENTRT_RUNS_REPLICA_ID"] = name
                if svc == "tasks":
                    env["AGENTRT_TASKS_REPLICA_ID"] = name
                self.replicas[svc].append(Replica(svc, name, host, self.ports[svc], env, state / "log.txt"))
        everyone = [r for svc in SERVICES for r in self.replicas[svc]]
        for replica in everyone:
            replica.start()
        for replica in everyone:
            wait_serving(replica.address, replica.proc)

    def kill(self, replica: Replica) -> None:
        """kill -9: nothing flushed, nothing released."""
        assert replica.proc is not None
        os.kill(replica.proc.pid, signal.SIGKILL)
        replica.proc.wait(30)

    def terminate(self, replica: Replica) -> int:
        """SIGTERM and wait for the drain to end; return the exit status."""
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGTERM)
        return replica.proc.wait(60)

    def restart(self, replica: Replica) -> None:
        """Start the replica again on its address (same replica id); wait until it serves."""
        replica.start()
        wait_serving(replica.address, replica.proc)

    def close(self) -> None:
        for replicas in self.replicas.values():
            for replica in replicas:
                if replica.alive():
                    assert replica.proc is not None
                    replica.proc.kill()
                    replica.proc.wait(30)
        if self.dns is not None:
            self.dns.stop()
        if self.databases:
            asyncio.run(drop_databases(self.databases))


def _ports_free_on(hosts: list[str], count: int) -> list[int]:
    """`count` ports free on every host right now."""
    out: list[int] = []
    while len(out) < count:
        port = free_ports(1)[0]
        if port not in out and not any(port_taken(h, port) for h in hosts):
            out.append(port)
    return out
