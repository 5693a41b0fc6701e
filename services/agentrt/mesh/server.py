"""Server bootstrap shared by every service: grpc.aio, health, reflection, drain.

Lifecycle of a `MeshServer`:
1. `start()` binds the port (SO_REUSEPORT off, so a taken port is refused with
   `PortInUseError`) — TLS when the config names a certificate (mTLS with `client_auth`),
   plaintext otherwise — and, when `health_port` is set, a second plaintext port that
   serves only grpc.health (the kubelet's gRPC probe speaks no TLS); starts serving with
   health NOT_SERVING, makes the config's TLS files the identity of the process's channels
   to its peers (`client.channels.use_process_tls`), runs the service's `ready` hook (open
   the database, create tables, connect peers), then marks every service SERVING.
2. `stop()` marks health NOT_SERVING (enter_graceful_shutdown), runs the `draining` hook
   (work of the service's own that must begin stopping now, within the same grace: the run
   loop's executors), lets in-flight calls finish for `grace_seconds`, then runs the `close`
   hook; the health and metrics ports close last. The drain is one budget counted from the
   moment `stop()` begins: `drain_left_seconds()` tells a hook what is left of it (the tool
   service's close gives its commands that, not a fixed time of its own).
`serve_forever()` does both around SIGTERM/SIGINT.

Every call passes the telemetry interceptor first (mesh/telemetry/rpc.py: RPC counts and
durations by method and status; a SERVER span joined to the caller's trace while tracing is
on), then the MeshInterceptor. The RPC series go into `registry` — the service's own, when
it has series of its own (the gateway's GatewayMetrics, mesh/telemetry/metrics.py's
RunMetrics...), so one registry holds everything the process reports — and, when
`config.metrics_port` is set, that registry is served as `/metrics` from the moment the gRPC
port is bound (a taken metrics port is `MetricsPortInUseError`, naming that port).

Connections older than `max_connection_age_seconds` get a GOAWAY (calls in flight finish),
so clients balancing over a DNS name re-resolve it and reach replicas added since.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError

from agentrt.client.channels import use_process_tls
from agentrt.mesh.calls import CallsMethod
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.interceptors import MeshInterceptor
from agentrt.mesh.security import TokenTable, server_credentials
from agentrt.mesh.telemetry.metrics import MetricsEndpoint, MetricsPortTakenError, RpcMetrics
from agentrt.mesh.telemetry.rpc import TelemetryServerInterceptor

log = logging.getLogger("agentrt.mesh")

Hook = Callable[[], Awaitable[None]]


class PortInUseError(RuntimeError):
    """The configured address could not be bound (the port is taken)."""


class MetricsPortInUseError(PortInUseError):
    """The metrics port (AGENTRT_<SVC>_METRICS_PORT) is taken.

    Attributes:
        port: the taken metrics port (not the gRPC port), for the caller's message.
    """

    def __init__(self, port: int, message: str) -> None:
        super().__init__(message)
        self.port = port


class StartupError(RuntimeError):
    """Something the service needs at start (e.g. a store) did not answer; the message says what."""


@dataclass
class ServiceBinding:
    """One gRPC service a process serves.

    Attributes:
        full_name: e.g. "agentrt.v1.SessionService" (health and reflection use it).
        register: adds the servicer to a grpc.aio.Server.
    """

    full_name: str
    register: Callable[[grpc.aio.Server], None]


def server_options(config: ServerConfig) -> list[tuple[str, int]]:
    """Return the gRPC server options.

    The hard size bound is twice the checked bound, so a request between the two gets the
    interceptor's clear INVALID_ARGUMENT/REQUEST_TOO_LARGE.
    """
    hard = config.max_request_bytes * 2
    options = [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", hard),
        ("grpc.max_send_message_length", hard),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ]
    if config.max_connection_age_seconds > 0:
        # No max_connection_age_grace: a long stream (StreamRunEvents) is never cut by it.
        options.append(("grpc.max_connection_age_ms", int(config.max_connection_age_seconds * 1000)))
    return options


def _bind(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> int:
    """Add a port; return it. Raises PortInUseError when it cannot be bound."""
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise PortInUseError(f"cannot listen on {address}: {exc}") from exc
    if port == 0:
        raise PortInUseError(f"cannot listen on {address}: the port is taken")
    return port


@dataclass
class MeshServer:
    """A service process's gRPC server (see the module docstring).

    Attributes:
        ready: run before the services turn SERVING (open the database, connect peers).
        close: run once the in-flight calls finished or their grace ran out.
        draining: run as the drain begins (NOT_SERVING), before the in-flight calls' grace.
        registry: the Prometheus registry of the process's series; None = a new one. The
            RPC series are added to it.
        metrics_port: the bound metrics port once started (0 = none).
        calls: the service's stream-of-calls method (its servicer's CallsMethod), for a runs
            service hosted in the same process to call without the wire (mesh/local_calls.py);
            None for a service the run loop does not call every turn.
        telemetry: once started, the interceptor that counts and traces its RPCs (local
            calls are recorded through it too).
        drain_deadline: once stop() began, the event loop time its drain ends (its grace
            after the call); None before.
    """

    config: ServerConfig
    services: Sequence[ServiceBinding]
    ready: Hook | None = None
    close: Hook | None = None
    port: int = 0
    health_port: int = 0
    registry: CollectorRegistry | None = None
    metrics_port: int = 0
    draining: Hook | None = None
    calls: Callable[[], CallsMethod] | None = None
    drain_deadline: float | None = field(default=None, init=False)
    telemetry: TelemetryServerInterceptor | None = field(default=None, init=False)
    _metrics: MetricsEndpoint | None = field(default=None, init=False)
    _server: grpc.aio.Server | None = field(default=None, init=False)
    _health_server: grpc.aio.Server | None = field(default=None, init=False)
    _health: health.aio.HealthServicer | None = field(default=None, init=False)
    _stopped: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    async def start(self) -> int:
        """Bind, serve, run the ready hook, mark SERVING; return the bound port.

        Raises:
            PortInUseError: the address (or the health port) is taken;
                MetricsPortInUseError for the metrics port.
            StartupError: the ready hook failed (a store refused or did not answer: OSError,
                SQLAlchemyError); the ports bound are closed again.
            ValueError: the token file or the TLS files are malformed or unreadable.
        """
        tokens = TokenTable.load(self.config.tokens_file) if self.config.tokens_file else None
        credentials = server_credentials(self.config.tls) if self.config.tls.serves_tls else None
        if not self.config.tls.serves_tls:
            self.config.tls.check()
        interceptor = MeshInterceptor(
            auth_token=self.config.auth_token,
            tokens=tokens,
            max_request_bytes=self.config.max_request_bytes,
            stopping=self._stopped,
        )
        if self.registry is None:
            self.registry = CollectorRegistry()
        telemetry = self.telemetry = TelemetryServerInterceptor(RpcMetrics(self.registry))
        server = grpc.aio.server(interceptors=[telemetry, interceptor], options=server_options(self.config))
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        for binding in self.services:
            binding.register(server)
        names = [b.full_name for b in self.services]
        reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
        port = _bind(server, self.config.address, credentials)
        if self.config.health_port:
            probe = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self._health, probe)
            self.health_port = _bind(probe, f"{self.config.host}:{self.config.health_port}", None)
            self._health_server = probe
        self._server, self.port = server, port
        if self.config.metrics_port:
            endpoint = MetricsEndpoint(self.registry)
            try:
                self.metrics_port = endpoint.start(self.config.host, self.config.metrics_port)
            except MetricsPortTakenError as exc:
                raise MetricsPortInUseError(exc.port, str(exc)) from exc
            self._metrics = endpoint
            log.info("metrics on http://%s:%d/metrics", self.config.host, self.metrics_port)
        for name in ["", *names]:
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        use_process_tls(self.config.tls)
        await server.start()
        if self._health_server is not None:
            await self._health_server.start()
        if self.ready is not None:
            try:
                await self.ready()
            except BaseException as exc:
                # Nothing was served yet: unbind at once, so a process hosting other services
                # (`serve all`) leaves no port of this one bound and no server to its loop's end.
                await self._unbind()
                if isinstance(exc, (OSError, SQLAlchemyError)):
                    # A store that did not answer (refused, unknown database, unwritable file):
                    # one line naming the service and the cause, not a traceback.
                    raise StartupError(
                        f"{', '.join(names)}: its store did not answer at start: {type(exc).__name__}: {exc}"
                    ) from exc
                raise
        for name in ["", *names]:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "serving %s on %s:%d (%s%s)",
            ",".join(names),
            self.config.host,
            port,
            "mTLS" if self.config.tls.client_auth else "TLS" if credentials else "plaintext",
            f", health also on plaintext port {self.health_port}" if self.health_port else "",
        )
        return port

    async def _unbind(self) -> None:
        """Close the ports a failed start bound (gRPC, health, metrics), without a drain."""
        for server in (self._server, self._health_server):
            if server is not None:
                await server.stop(0)
        self._server = self._health_server = None
        if self._metrics is not None:
            await self._metrics.stop()
            self._metrics = None

    async def stop(self, grace: float | None = None) -> None:
        """Mark NOT_SERVING, run the draining hook, drain in-flight calls for `grace` s, then close."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.grace_seconds if grace is None else grace
        self.drain_deadline = asyncio.get_running_loop().time() + grace
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self.draining is not None:
            await self.draining()
        if self._server is not None:
            await self._server.stop(grace)
        if self.close is not None:
            await self.close()
        if self._health_server is not None:
            await self._health_server.stop(0)
        if self._metrics is not None:
            await self._metrics.stop()
            self._metrics = None

    def drain_left_seconds(self) -> float:
        """Seconds left of the drain stop() began (0 once spent); the configured grace before stop()."""
        if self.drain_deadline is None:
            return self.config.grace_seconds
        return max(0.0, self.drain_deadline - asyncio.get_running_loop().time())

    async def wait_stopped(self) -> None:
        """Return once stop() has begun."""
        await self._stopped.wait()

    async def serve_forever(self) -> None:
        """Start, then run until SIGTERM or SIGINT, then drain and stop."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            await stop.wait()
        finally:
            await self.stop()
