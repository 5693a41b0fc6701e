"""Start the whole mesh as five processes and watch them: `agentrt up`, the demo and the e2e tests.

`start_mesh()` is the one way the mesh is started on a machine. It checks every port
(which ports: ports.py) before spawning anything, spawns each service as its own process
(the peers first, then runs once they are all SERVING: see START_PHASES)
(`python -m agentrt.cli.main serve <svc> --port P --host H`, in its own session so a
terminal's Ctrl-C reaches only the supervisor; on Linux a child also dies with its
supervisor), wires peers through `AGENTRT_<PEER>_ADDR`, gives each a Prometheus
`/metrics` port of its own (`AGENTRT_<SVC>_METRICS_PORT`: a free port the OS chose, unless
the environment names one; 0 there = none), and returns only once every
grpc.health.v1 check answers SERVING. A child that dies before that (a port taken at bind,
a crash) stops the others and raises; a mesh that is not ready within the bound raises
naming the services that are not.

Invariants: the returned `Mesh` owns its children; `stop()` always leaves none running
(SIGTERM, a grace, then SIGKILL) and may be called twice. Children log to
`<state_dir>/logs/<svc>.log`; `write_manifest()` (called by `agentrt up`) leaves
`mesh.json` in the state dir naming each address, metrics address and pid until `stop()`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.cli.ports import metrics_ports, port_taken, ports_from_base
from agentrt.cli.serve import EXIT_PORT_TAKEN, SERVICES

#: Start order: every peer first, then runs once they all answer SERVING, because a runs
#: replica takes over unfinished runs at start and drives them through its peers at once.
START_PHASES: tuple[tuple[str, ...], ...] = (("sessions", "tools", "gateway", "tasks"), ("runs",))
#: How long start_mesh waits for every health check to answer SERVING, in seconds (all phases).
READY_TIMEOUT_SECONDS = 120.0
#: How long stop() lets children drain after SIGTERM before SIGKILL, in seconds.
STOP_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.1
_LOG_TAIL_LINES = 15


class MeshStartError(RuntimeError):
    """The mesh could not start; nothing it spawned is left running.

    Attributes:
        service: the service at fault ("" when several are).
        log_tail: the last lines of that service's log.
    """

    def __init__(self, message: str, service: str = "", log_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.service = service
        self.log_tail = list(log_tail)


class PortTakenError(MeshStartError):
    """A service's port (or its metrics port) is already in use on the host."""

    def __init__(
        self, service: str, host: str, port: int, log_tail: Sequence[str] = (), *, metrics: bool = False
    ) -> None:
        what = f"the {service} service's metrics" if metrics else f"the {service} service"
        super().__init__(f"port {port} on {host} for {what} is already in use", service, log_tail)
        self.host = host
        self.port = port


@dataclass(frozen=True)
class ChildExit:
    """A service process that ended.

    Attributes:
        name: the service.
        returncode: its exit status (negative: killed by that signal).
        log_tail: the last lines of its log, oldest first (at most 15).
    """

    name: str
    returncode: int
    log_tail: list[str]

    def describe(self) -> str:
        """Return a one-line account, e.g. "gateway exited with status 1"."""
        if self.returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-self.returncode}"
        else:
            how = f"exited with status {self.returncode}"
        return f"{self.name} {how}"


@dataclass
class _Child:
    name: str
    host: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes]
    log_file: IO[bytes]
    metrics_port: int = 0
    #: What the process is named after: the service, or "all" for `serve all`'s one process.
    unit: str = ""

    def __post_init__(self) -> None:
        self.unit = self.unit or self.name

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics" if self.metrics_port else ""


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> list[str]:
    """Return the last `lines` lines of a log file (decoded leniently); [] if it is missing."""
    try:
        data = path.read_bytes()[-64 * 1024 :]
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


@dataclass
class Mesh:
    """A running mesh started by `start_mesh` (see the module docstring).

    Attributes:
        state_dir: absolute state directory (SQLite files, workspaces, logs).
        host: the interface every service listens on.
    """

    state_dir: Path
    host: str
    _children: dict[str, _Child] = field(default_factory=dict)
    _stopped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _ordered(self) -> list[_Child]:
        # Children are spawned in START_PHASES order; every view lists them in SERVICES order.
        return [self._children[name] for name in SERVICES if name in self._children]

    @property
    def addresses(self) -> dict[str, str]:
        """Service name -> "host:port", in SERVICES order."""
        return {child.name: child.address for child in self._ordered()}

    @property
    def pids(self) -> dict[str, int]:
        """Service name -> process id, in SERVICES order."""
        return {child.name: child.process.pid for child in self._ordered()}

    @property
    def metrics_urls(self) -> dict[str, str]:
        """Service name -> its Prometheus endpoint ("http://host:port/metrics", "" = none), in order."""
        return {child.name: child.metrics_url for child in self._ordered()}

    @property
    def log_paths(self) -> dict[str, Path]:
        """Service name -> its log file, in SERVICES order."""
        return {child.name: child.log_path for child in self._ordered()}

    def client_env(self) -> dict[str, str]:
        """Return AGENTRT_<SVC>_ADDR for every service, for clients and child processes."""
        return {f"AGENTRT_{name.upper()}_ADDR": addr for name, addr in self.addresses.items()}

    def exited(self) -> ChildExit | None:
        """Return the first service process that has ended, or None while all run."""
        for child in self._ordered():
            code = child.process.poll()
            if code is not None:
                child.log_file.flush()
                return ChildExit(child.unit, code, log_tail(child.log_path))
        return None

    def _units(self) -> list[_Child]:
        """One child per process (`serve all`'s five services share one)."""
        seen: dict[int, _Child] = {}
        for child in self._children.values():
            seen.setdefault(id(child.process), child)
        return list(seen.values())

    def wait_exit(self, timeout: float | None = None) -> ChildExit | None:
        """Wait until some service process ends; return it, or None after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            gone = self.exited()
            if gone is not None:
                return gone
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_SECONDS)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> dict[str, int]:
        """Stop every child: SIGTERM, wait up to `grace` seconds in total, then SIGKILL.

        Returns:
            Service name -> exit status (negative: the signal that ended it).
        """
        with self._lock:
            if not self._stopped:
                self._stopped = True
                _terminate([c.process for c in self._units()], grace)
                for child in self._units():
                    child.log_file.close()
                with contextlib.suppress(OSError):
                    (self.state_dir / "mesh.json").unlink()
        return {c.name: c.process.returncode for c in self._ordered()}

    def write_manifest(self) -> Path:
        """Write `<state_dir>/mesh.json` ({service: {address, metrics, pid, log}}); return its path."""
        path = self.state_dir / "mesh.json"
        data = {
            c.name: {
                "address": c.address,
                "metrics": c.metrics_url,
                "pid": c.process.pid,
                "log": str(c.log_path),
            }
            for c in self._ordered()
        }
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    def __enter__(self) -> Mesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(processes: Sequence[subprocess.Popen[bytes]], grace: float) -> None:
    for proc in processes:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in processes:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


def _spawn(name: str, host: str, port: int, state_dir: Path, env: Mapping[str, str]) -> _Child:
    """Start `agentrt serve <name>` (name "all": every service, on its AGENTRT_<SVC>_PORT)."""
    log_path = state_dir / "logs" / f"{name}.log"
    log_file = log_path.open("wb")
    cmd = [sys.executable, "-m", "agentrt.cli.main", "serve", name, "--host", host]
    if name != "all":
        cmd += ["--port", str(port)]
    child_env = dict(env)
    # The child asks the kernel for SIGTERM when its supervisor dies (serve.py). The kernel
    # ties that to the *thread* that forked, so it is only asked for from the main thread.
    if threading.current_thread() is threading.main_thread():
        child_env["AGENTRT_SUPERVISOR_PID"] = str(os.getpid())
    process = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=child_env,
        cwd=state_dir,
        start_new_session=True,
    )
    metrics = int(env.get(f"AGENTRT_{name.upper()}_METRICS_PORT", "0") or 0)
    return _Child(name, host, port, log_path, process, log_file, metrics)


def _health_status(address: str, timeout: float) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return health_pb2.HealthCheckResponse.UNKNOWN
        return int(resp.status)


def _failure_of(mesh: Mesh, gone: ChildExit) -> MeshStartError:
    if gone.name == "all":  # `serve all`: the taken port is the one still held by another
        if gone.returncode == EXIT_PORT_TAKEN:
            for child in mesh._ordered():
                if port_taken(child.host, child.port):
                    return PortTakenError(child.name, child.host, child.port, gone.log_tail)
                if child.metrics_port and port_taken(child.host, child.metrics_port):
                    return PortTakenError(
                        child.name, child.host, child.metrics_port, gone.log_tail, metrics=True
                    )
        return MeshStartError(f"{gone.describe()} while starting", "", gone.log_tail)
    child = mesh._children[gone.name]
    if gone.returncode == EXIT_PORT_TAKEN:
        # Its gRPC port free again and the metrics port still held: the metrics port it was.
        if (
            child.metrics_port
            and not port_taken(child.host, child.port)
            and port_taken(child.host, child.metrics_port)
        ):
            return PortTakenError(gone.name, child.host, child.metrics_port, gone.log_tail, metrics=True)
        return PortTakenError(gone.name, child.host, child.port, gone.log_tail)
    return MeshStartError(f"{gone.describe()} while starting", gone.name, gone.log_tail)


def start_mesh(
    state_dir: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    ports: Mapping[str, int] | None = None,
    base_port: int | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = READY_TIMEOUT_SECONDS,
    one_process: bool = False,
) -> Mesh:
    """Start the five services as separate processes and wait until all are SERVING.

    With `one_process`, the five are one process instead (`agentrt serve all`, cli/serve_all.py:
    the run loop calls its peers without the wire), each still on its own port; the Mesh
    names every service with that one process (its log is `logs/all.log`).

    Args:
        state_dir: where SQLite files, workspaces and logs go (created; made absolute).
        host: interface to listen on.
        ports: service -> port; missing services use `ports_from_base(base_port)`.
        base_port: first of five consecutive ports (SERVICES order); None = DEFAULT_PORTS.
        env: extra environment for every child (e.g. provider base URLs); it wins over
            this process's environment, and the peer addresses win over both. A service's
            AGENTRT_<SVC>_METRICS_PORT in either is its metrics port (0 = none); a service
            without one gets a free port.
        ready_timeout: bound on the whole wait for SERVING (both phases), in seconds.
        one_process: the five services in one process (see above).

    Returns:
        The running Mesh; the caller must `stop()` it (or use it as a context manager).

    Raises:
        PortTakenError: a port is in use (checked before spawning, and again when a
            child exits at bind). Nothing was left running.
        MeshStartError: a child died while starting (its name, status and log tail), or
            some service was not SERVING within `ready_timeout` (named). Nothing was left running.
        ValueError: a malformed AGENTRT_<SVC>_METRICS_PORT.
    """
    root = Path(state_dir).resolve()
    (root / "logs").mkdir(parents=True, exist_ok=True)
    chosen = {**ports_from_base(base_port), **(ports or {})}
    for name in SERVICES:
        if port_taken(host, chosen[name]):
            raise PortTakenError(name, host, chosen[name])
    mesh = Mesh(state_dir=root, host=host)
    child_env = {**os.environ, **(env or {}), "AGENTRT_STATE_DIR": str(root), "PYTHONUNBUFFERED": "1"}
    child_env.update({f"AGENTRT_{n.upper()}_ADDR": f"{host}:{chosen[n]}" for n in SERVICES})
    metrics = metrics_ports(child_env, host, avoid=list(chosen.values()))
    for name, port in metrics.items():
        if port and port_taken(host, port):
            raise PortTakenError(name, host, port, metrics=True)
    child_env.update({f"AGENTRT_{n.upper()}_METRICS_PORT": str(p) for n, p in metrics.items()})
    deadline = time.monotonic() + ready_timeout
    try:
        if one_process:
            child_env.update({f"AGENTRT_{n.upper()}_PORT": str(chosen[n]) for n in SERVICES})
            every = _spawn("all", host, 0, root, child_env)
            for name in SERVICES:
                mesh._children[name] = dataclasses.replace(
                    every, name=name, port=chosen[name], metrics_port=metrics[name], unit="all"
                )
            _wait_ready(mesh, SERVICES, deadline, ready_timeout)
            return mesh
        for phase in START_PHASES:
            for name in phase:
                mesh._children[name] = _spawn(name, host, chosen[name], root, child_env)
            _wait_ready(mesh, phase, deadline, ready_timeout)
    except BaseException:
        mesh.stop(grace=2.0)
        raise
    return mesh


def _wait_ready(mesh: Mesh, names: Sequence[str], deadline: float, timeout: float) -> None:
    """Wait until the services `names` answer SERVING, up to `deadline` (time.monotonic)."""
    pending = {name: mesh._children[name].address for name in names}
    while pending:
        gone = mesh.exited()
        if gone is not None:
            raise _failure_of(mesh, gone)
        for name, address in list(pending.items()):
            if _health_status(address, timeout=1.0) == health_pb2.HealthCheckResponse.SERVING:
                del pending[name]
        if not pending:
            return
        if time.monotonic() >= deadline:
            names = ", ".join(f"{n} ({a})" for n, a in pending.items())
            raise MeshStartError(f"not SERVING after {timeout:.0f} s: {names}", next(iter(pending)))
        time.sleep(_POLL_SECONDS)
