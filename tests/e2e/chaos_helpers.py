"""Helpers of the crash tests: a mesh on fresh PostgreSQL databases, runs replicas to kill -9.

`ChaosMesh` starts the five services with `start_mesh` (the code `agentrt up` uses) with
runs, sessions and tools on PostgreSQL databases of their own (created here, dropped
after), a short run lease, and the gateway pointed at the provider emulator. It can spawn
more `agentrt serve runs` replicas on the same databases, kill any of them with SIGKILL,
restart one on its port, and follow a run's event stream across replicas, reconnecting
from the last seq seen (what a real client does) and checking that no seq ever comes back
with different content.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from e2e_helpers import NO_LOCAL_MODEL, STATE_TIMEOUT, free_port_map
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.cli.up import Mesh, start_mesh
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from tests.emulators.providers import ProviderEmulator
from tests.ports import free_ports
from tests.stores import PG_DATABASE, PG_HOST

#: The run lease of the crash tests' replicas, in seconds (a dead owner's runs are taken
#: over once it expires).
LEASE_SECONDS = 1.5


async def create_databases(names: list[str]) -> None:
    """Create empty PostgreSQL databases."""
    import asyncpg

    conn = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/postgres")
    try:
        for name in names:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def drop_databases(names: list[str]) -> None:
    """Drop databases (every connection to them is closed first)."""
    import asyncpg

    conn = await asyncpg.connect(f"postgresql://postgres@{PG_HOST}/postgres")
    try:
        for name in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def wait_serving(
    address: str, proc: subprocess.Popen[bytes] | None = None, bound_s: float = STATE_TIMEOUT
) -> None:
    """Wait until grpc.health answers SERVING at address (a process that dies fails at once)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process for {address} exited with {proc.returncode}")
        with grpc.insecure_channel(address) as channel:
            try:
                resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"{address} did not serve within {bound_s:.0f} s")


@dataclass
class Replica:
    """A service process of the chaos mesh: its address, its process (None: the mesh's own).

    `service` is what it serves; `plain` is True when it was started with nothing beyond
    the mesh's environment (and, for runs, its own replica id): interchangeable with the
    mesh's own process of that service. `log` is its log file (None: the mesh's own, under
    `<state>/logs/`).
    """

    name: str
    address: str
    proc: subprocess.Popen[bytes] | None = None
    pid: int = 0
    service: str = "runs"
    plain: bool = True
    log: Path | None = None


@dataclass
class ChaosMesh:
    """The mesh, its databases, and the runs replicas (see the module docstring)."""

    mesh: Mesh
    emu: ProviderEmulator
    root: Path
    env: dict[str, str]
    databases: list[str]
    replicas: dict[str, Replica] = field(default_factory=dict)
    #: Every process `spawn` started, oldest first (dead ones included until a reset).
    spawned: list[Replica] = field(default_factory=list)
    #: The gateway process now serving (the mesh's, or one a test started in its place).
    gateway_pid: int = 0

    @property
    def sessions(self) -> str:
        return self.mesh.addresses["sessions"]

    @property
    def tools(self) -> str:
        return self.mesh.addresses["tools"]

    def spawn(self, service: str, name: str, port: int, extra: dict[str, str] | None = None) -> Replica:
        """Start `agentrt serve <service>` on port with the mesh's environment; wait until it serves."""
        env = {
            **os.environ,
            **self.env,
            **self.mesh.client_env(),
            "AGENTRT_STATE_DIR": str(self.mesh.state_dir),
        }
        env.pop("AGENTRT_SUPERVISOR_PID", None)
        env.update(extra or {})
        # A log of its own per process (a name may be started again, by this test or a later one).
        log_path = self.root / f"{name}.log"
        for n in itertools.count(2):
            if not log_path.exists():
                break
            log_path = self.root / f"{name}-{n}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt.cli.main", "serve", service, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.mesh.state_dir,
            start_new_session=True,
        )
        own_id = {"AGENTRT_RUNS_REPLICA_ID": name} if service == "runs" else {}
        plain = all(own_id.get(key) == value for key, value in (extra or {}).items())
        address = f"127.0.0.1:{port}"
        replica = Replica(name, address, proc, proc.pid, service, plain, log_path)
        self.spawned.append(replica)
        wait_serving(address, proc)
        if service == "runs":
            self.replicas[name] = replica
        return replica

    def home(self, service: str) -> Replica:
        """The process serving the mesh's own address of `service` now: the last one spawned
        there that is still up, else the mesh's own (which may have been killed)."""
        address = self.mesh.addresses[service]
        for replica in reversed(self.spawned):
            if replica.address == address and replica.proc is not None and replica.proc.poll() is None:
                return replica
        name = "a" if service == "runs" else service
        return Replica(name, address, None, self.mesh.pids[service], service)

    def kill(self, replica: Replica) -> None:
        """SIGKILL a process and reap it (kill -9: nothing is flushed, nothing is released)."""
        os.kill(replica.pid, signal.SIGKILL)
        if replica.proc is not None:
            replica.proc.wait(30)
        else:
            _reap(replica.pid)

    def restart(self, replica: Replica, extra: dict[str, str] | None = None) -> Replica:
        """Start the replica again on its port, with the same replica id."""
        port = int(replica.address.rsplit(":", 1)[1])
        env = {"AGENTRT_RUNS_REPLICA_ID": replica.name, **(extra or {})}
        return self.spawn("runs", replica.name, port, env)

    def close(self) -> None:
        for replica in self.spawned:
            stop_process(replica)
        self.mesh.stop()


def stop_process(replica: Replica, grace_s: float = 15.0) -> None:
    """End a process this test spawned: SIGCONT (a SIGSTOPped one cannot exit), SIGTERM,
    `grace_s` seconds to drain, then SIGKILL. Nothing for a process already reaped."""
    proc = replica.proc
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)


def _reap(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        time.sleep(0.02)


def start_chaos_mesh(root: Path, emu: ProviderEmulator) -> ChaosMesh:
    """Start the mesh on fresh PostgreSQL databases, runs as replica "a" (call from no event loop)."""
    tag = uuid.uuid4().hex[:10]
    names = [f"{PG_DATABASE}_chaos_{svc}_{tag}" for svc in ("runs", "sessions", "tools", "gateway")]
    asyncio.run(create_databases(names))
    urls = [f"postgresql+asyncpg://postgres@{PG_HOST}/{n}" for n in names]
    env = {
        # the gateway's providers are the emulator (official SDKs, base URLs only); a scripted
        # provider error fails at once rather than after backoff
        "AGENTRT_OPENAI_BASE_URL": emu.base_url + "/v1",
        "AGENTRT_OPENAI_API_KEY": "test-key",
        "AGENTRT_ANTHROPIC_BASE_URL": emu.base_url,
        "AGENTRT_ANTHROPIC_API_KEY": "test-key",
        "AGENTRT_GATEWAY_MAX_RETRIES": "0",
        "AGENTRT_LOCAL_MODEL_PATH": NO_LOCAL_MODEL,
        "AGENTRT_RUNS_DB": urls[0],
        "AGENTRT_SESSIONS_DB": urls[1],
        "AGENTRT_TOOLS_DB": urls[2],
        # the model-call journal on PostgreSQL, so a gateway killed mid-call leaves its claim
        # where the next gateway sees it; a short lease keeps the takeover test short
        "AGENTRT_GATEWAY_DB": urls[3],
        "AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS": "3",
        "AGENTRT_RUNS_LEASE_SECONDS": str(LEASE_SECONDS),
        "AGENTRT_RUNS_PEER_UNAVAILABLE_SECONDS": "60",
    }
    try:
        mesh = start_mesh(root / "state", ports=free_port_map(), env={**env, "AGENTRT_RUNS_REPLICA_ID": "a"})
    except BaseException:
        asyncio.run(drop_databases(names))
        raise
    chaos = ChaosMesh(mesh, emu, root, env, names)
    chaos.replicas["a"] = Replica("a", mesh.addresses["runs"], None, mesh.pids["runs"])
    chaos.gateway_pid = mesh.pids["gateway"]
    return chaos


def new_port() -> int:
    """A port free right now."""
    return free_ports(1)[0]


class Follower:
    """A client following one run across replicas, reconnecting from the last seq it saw.

    `seen` maps every seq received to the event's bytes; receiving a seq again with other
    bytes fails at once (a gap event carries the seq of the last good event, so gaps are kept
    apart in `gaps`).
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.seen: dict[int, bytes] = {}
        self.order: list[pb.RunEvent] = []
        self.gaps: list[pb.EventGap] = []
        self.last = 0
        self.ended = False

    def _take(self, event: pb.RunEvent) -> None:
        if event.WhichOneof("payload") == "gap":
            self.gaps.append(event.gap)
            return
        raw = event.SerializeToString()
        before = self.seen.get(event.seq)
        assert before is None or before == raw, f"seq {event.seq} came back as another event"
        if before is None:
            assert event.seq > self.last, f"seq {event.seq} after {self.last}"
            self.seen[event.seq] = raw
            self.order.append(event)
            self.last = event.seq
        self.ended = event.WhichOneof("payload") == "stream_end"

    async def follow(self, address: str, until: str = "", predicate=None) -> pb.RunEvent | None:
        """Read from address after the last seq; return at the first event of kind `until`
        (or matching predicate), or when the stream ends or breaks."""
        async with grpc.aio.insecure_channel(address) as channel:
            call = pb_grpc.RunServiceStub(channel).StreamRunEvents(
                pb.StreamRunEventsRequest(run_id=self.run_id, after_seq=self.last)
            )
            try:
                async for msg in call:
                    self._take(msg.event)
                    kind = msg.event.WhichOneof("payload")
                    if (until and kind == until) or (predicate is not None and predicate(msg.event)):
                        return msg.event
                    if self.ended:
                        return None
            except grpc.aio.AioRpcError:
                return None  # the replica went away: the caller reconnects elsewhere
        return None

    async def to_the_end(self, addresses: list[str], bound_s: float = STATE_TIMEOUT) -> None:
        """Follow until stream_end, trying each address in turn (any replica serves the stream)."""
        deadline = time.monotonic() + bound_s
        i = 0
        while not self.ended:
            if time.monotonic() > deadline:
                raise AssertionError(f"the stream of {self.run_id} did not end; last seq {self.last}")
            await self.follow(addresses[i % len(addresses)])
            i += 1
            if not self.ended:
                await asyncio.sleep(0.1)


async def session_entries(address: str, session_id: str) -> list[spb.Entry]:
    """The session's raw log."""
    async with grpc.aio.insecure_channel(address) as channel:
        resp = await spb_grpc.SessionServiceStub(channel).ListEntries(
            spb.ListEntriesRequest(session=spb.SessionRef(session_id=session_id))
        )
        return list(resp.entries)


def requests_of(emu: ProviderEmulator, cell: str) -> list[str]:
    """The model requests the emulator received for `cell`, in order, each as canonical JSON."""
    return [json.dumps(b, sort_keys=True) for _, b in emu.requests if f"cell:{cell}" in json.dumps(b)]


def check_session(entries: list[spb.Entry]) -> None:
    """No duplicate entry, every tool call with exactly one result, nothing answering no call."""
    ids = [e.entry_id for e in entries]
    assert len(ids) == len(set(ids))
    calls = [e.item.tool_call.call_id for e in entries if e.item.HasField("tool_call")]
    results = [e.item.tool_result.call_id for e in entries if e.item.HasField("tool_result")]
    assert len(calls) == len(set(calls)), f"a call was written twice: {calls}"
    assert sorted(calls) == sorted(results), f"calls {calls} vs results {results}"
    items = [(e.run_id, e.turn, e.item.SerializeToString()) for e in entries if e.kind == "item"]
    assert len(items) == len(set(items)), "an entry was written twice"
