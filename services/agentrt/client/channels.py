"""Long-lived gRPC channels to mesh services: balanced, retried, with token and tenant metadata.

One channel per peer for the life of the process (HTTP/2 multiplexes every call), so a
turn pays no connection setup. `MeshClient` bundles the five stubs; any of its addresses
may be empty when the caller does not need that service.

Every channel is a client-side load balancer over a DNS name: "host:port" becomes
`dns:///host:port`, every address the name resolves to gets a subchannel, and calls go
round robin over the READY ones (`round_robin`), so the replicas behind one headless
Kubernetes Service share the load instead of one long-lived connection pinning a caller
to one pod. The name is re-resolved when a connection fails or a server sends GOAWAY
(`ServerConfig.max_connection_age_seconds`). A target that already names a resolver
(`dns://10.0.0.10/name:port`, `ipv4:`, `unix:`) is used as is.

The service config also carries gRPC's own retry policy: calls that are safe to send twice
(`IDEMPOTENT_METHODS`: reads, and ExecuteTool, which the tool service journals by
run_id + call_id) are retried on UNAVAILABLE, with exponential backoff, on another
replica, under a retry throttle so a service that is down is not flooded. Any call whose
bytes never left the client is retried by gRPC whatever its method (transparent retry).
`wait_for_ready=True` makes calls wait for a replica to be READY (bounded by the call's
deadline) instead of failing at once while none is.

While the process traces (mesh/telemetry/tracing.py, set up at its edge) a channel also
carries the trace context: every call opens a CLIENT span and sends its W3C `traceparent`
(mesh/telemetry/rpc.py), so the service it calls continues the same trace.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from agentrt.client.metadata import metadata_interceptors
from agentrt.mesh.config import MAX_REQUEST_BYTES
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.security import TlsConfig, channel_credentials
from agentrt.mesh.telemetry.rpc_client import client_interceptors
from agentrt.mesh.telemetry.tracing import tracing_enabled
from agentrt.v1 import (
    gateway_service_pb2_grpc,
    run_service_pb2_grpc,
    session_service_pb2_grpc,
    task_service_pb2_grpc,
    tool_service_pb2_grpc,
)

#: Methods safe to send twice, by service: retried on UNAVAILABLE by the service config.
#: Writes whose repeat would do a thing twice (StartRun, CreateSession, an unfenced
#: AppendEntries, Generate, which a provider would bill twice) are absent.
IDEMPOTENT_METHODS: dict[str, tuple[str, ...]] = {
    "agentrt.v1.RunService": ("GetAgent", "GetRun", "ListRuns", "StreamRunEvents"),
    "agentrt.v1.ModelGatewayService": ("CountTokens", "ListModels"),
    "agentrt.v1.ToolService": (
        "ListTools",
        "ExecuteTool",
        "StreamExecuteTool",
        "GetExecution",
        "GetSandbox",
        "DownloadWorkspace",
    ),
    "agentrt.v1.SessionService": ("GetSession", "ListSessions", "ListEntries", "GetContext", "WatchSession"),
    "agentrt.v1.TaskService": ("GetTask", "ListTasks"),
    "grpc.health.v1.Health": ("Check",),
}

#: gRPC's retry policy of the idempotent methods (gRFC A6): up to 5 attempts, 0.1 s backoff
#: doubling to 2 s (each wait drawn uniformly below it), on UNAVAILABLE only.
RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.1s",
    "maxBackoff": "2s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


#: Methods safe to re-send only for a caller that fences them itself. The run loop sends
#: every AppendEntries with expected_last_seq (a second copy is refused with SEQ_MISMATCH, and
#: runs/loop/persistence.py recognizes its own batch in the log); RecoverSession appends nothing the
#: second time; SwitchBranch to the same leaf twice lands on that leaf; CancelExecution of a
#: call already cancelled answers the same. Generate/StreamGenerate are in no list: a provider
#: would bill (and answer) twice.
FENCED_METHODS: dict[str, tuple[str, ...]] = {
    "agentrt.v1.SessionService": ("AppendEntries", "RecoverSession", "SwitchBranch"),
    "agentrt.v1.ToolService": ("CancelExecution",),
}


def service_config(*, wait_for_ready: bool = False, fenced: bool = False) -> str:
    """Return the channel's service config (JSON): round_robin, the retry policy, the throttle.

    Args:
        wait_for_ready: every method waits for a READY replica instead of failing fast.
        fenced: the retry policy covers FENCED_METHODS too (a caller that fences them).
    """
    retried = {**IDEMPOTENT_METHODS}
    if fenced:
        for service, methods in FENCED_METHODS.items():
            retried[service] = (*retried.get(service, ()), *methods)
    idempotent = [
        {"service": service, "method": method} for service, methods in retried.items() for method in methods
    ]
    configs: list[dict[str, object]] = [{"name": idempotent, "retryPolicy": RETRY_POLICY}]
    if wait_for_ready:
        configs[0]["waitForReady"] = True
        configs.append({"name": [{}], "waitForReady": True})
    return json.dumps(
        {
            "loadBalancingConfig": [{"round_robin": {}}],
            "methodConfig": configs,
            # gRFC A6 throttling: each failed attempt takes a token, each success gives back
            # 0.1; retries pause below half of 100. A replica dying under load fails many
            # calls at once, all retried; a service that is down everywhere is not flooded.
            "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1},
        }
    )


_RESOLVER_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:")


def grpc_target(address: str) -> str:
    """Return the gRPC target of an address: "host:port" -> "dns:///host:port"; a scheme is kept."""
    return address if address.startswith(_RESOLVER_SCHEMES) else f"dns:///{address}"


_process_tls = TlsConfig()


def use_process_tls(tls: TlsConfig) -> None:
    """Make tls the identity of this process's channels that name none (MeshServer.start calls it).

    A service dials its peers with the certificate it serves with: one Secret configures
    both sides of mTLS. Channels opened with an explicit `tls` ignore this.
    """
    global _process_tls
    _process_tls = tls


def open_channel(
    target: str,
    *,
    token: str = "",
    tenant: str = "",
    tls: TlsConfig | None = None,
    wait_for_ready: bool = False,
    fenced: bool = False,
    options: Sequence[tuple[str, str | int]] = (),
) -> grpc.aio.Channel:
    """Open a long-lived, balanced, retrying channel (see the module docstring).

    Args:
        target: "host:port" of the service (a DNS name, or an IP), or a full gRPC target.
        token: bearer token sent as `authorization: Bearer <token>`; "" sends none.
        tenant: tenant sent as `x-agentrt-tenant`; "" sends none (the server's default, or
            the tenant the token is bound to).
        tls: TLS files of the channel; None = the process's (`use_process_tls`), plaintext
            unless set. TLS checks the server certificate against the target's host, or
            `tls.server_name`.
        wait_for_ready: calls wait (within their deadline) for a READY replica instead of
            failing with UNAVAILABLE while none is.
        fenced: gRPC's retry policy also re-sends FENCED_METHODS (the run loop's channels).
        options: further gRPC channel arguments, after (so over) the mesh's own, e.g.
            ("grpc.dns_min_time_between_resolutions_ms", 1000): how soon the DNS name may be
            resolved again (gRPC's default is 30 s).

    Raises:
        OSError: a TLS file cannot be read.
    """
    pairs: list[tuple[str, str]] = []
    if token:
        pairs.append(("authorization", f"Bearer {token}"))
    if tenant:
        pairs.append((TENANT_HEADER, tenant))
    security = _process_tls if tls is None else tls
    arguments: list[tuple[str, str | int]] = [
        ("grpc.max_receive_message_length", MAX_REQUEST_BYTES * 2),
        ("grpc.max_send_message_length", MAX_REQUEST_BYTES * 2),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config(wait_for_ready=wait_for_ready, fenced=fenced)),
        # Our service config, never one a DNS TXT record would substitute.
        ("grpc.service_config_disable_resolution", 1),
        # Subchannels of this channel only: a connection another channel of the process saw
        # refused (a replica that restarted on the same address, a test's stopped server whose
        # port was handed out again) never makes this channel fail fast during that one's
        # reconnect backoff.
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if security.server_name:
        arguments.append(("grpc.ssl_target_name_override", security.server_name))
    arguments.extend(options)
    # Token and tenant on every call kind, client-streaming ones included (client/metadata.py);
    # the trace context too while tracing is on (none at all otherwise: no cost when off).
    interceptors = [
        *(client_interceptors(target) if tracing_enabled() else ()),
        *metadata_interceptors(pairs),
    ]
    if security.dials_tls:
        return grpc.aio.secure_channel(
            grpc_target(target), channel_credentials(security), options=arguments, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(grpc_target(target), options=arguments, interceptors=interceptors)


@dataclass
class MeshClient:
    """Stubs of the mesh services over long-lived channels.

    Attributes:
        runs, gateway, tools, sessions, tasks: "host:port" of each service ("" = unused).
        token: bearer token; tenant: the tenant every call is scoped to.
        tls: TLS files of the channels (None = the process's, see `use_process_tls`).
        wait_for_ready: calls wait for a READY replica (see `open_channel`).
        fenced: the retry policy covers FENCED_METHODS too (see `open_channel`).
    """

    runs: str = ""
    gateway: str = ""
    tools: str = ""
    sessions: str = ""
    tasks: str = ""
    token: str = ""
    tenant: str = ""
    tls: TlsConfig | None = None
    wait_for_ready: bool = False
    fenced: bool = False
    _channels: list[grpc.aio.Channel] = field(default_factory=list, init=False)

    def _channel(self, target: str, name: str) -> grpc.aio.Channel:
        if not target:
            raise ValueError(f"no address configured for the {name} service")
        channel = open_channel(
            target,
            token=self.token,
            tenant=self.tenant,
            tls=self.tls,
            wait_for_ready=self.wait_for_ready,
            fenced=self.fenced,
        )
        self._channels.append(channel)
        self._by_name[name] = channel
        return channel

    def channel(self, name: str) -> grpc.aio.Channel:
        """Return the channel of a service ("runs", "gateway", "tools", "sessions", "tasks").

        Raises:
            ValueError: the service has no address.
        """
        if name not in self._by_name:
            getattr(self, _STUB_OF[name])
        return self._by_name[name]

    def __post_init__(self) -> None:
        self._stubs: dict[str, object] = {}
        self._by_name: dict[str, grpc.aio.Channel] = {}

    def _stub(self, name: str, target: str, factory: type) -> object:
        if name not in self._stubs:
            self._stubs[name] = factory(self._channel(target, name))
        return self._stubs[name]

    @property
    def run_service(self) -> run_service_pb2_grpc.RunServiceStub:
        """The RunService stub."""
        return self._stub("runs", self.runs, run_service_pb2_grpc.RunServiceStub)  # type: ignore[return-value]

    @property
    def gateway_service(self) -> gateway_service_pb2_grpc.ModelGatewayServiceStub:
        """The ModelGatewayService stub."""
        return self._stub(  # type: ignore[return-value]
            "gateway", self.gateway, gateway_service_pb2_grpc.ModelGatewayServiceStub
        )

    @property
    def tool_service(self) -> tool_service_pb2_grpc.ToolServiceStub:
        """The ToolService stub."""
        return self._stub("tools", self.tools, tool_service_pb2_grpc.ToolServiceStub)  # type: ignore[return-value]

    @property
    def session_service(self) -> session_service_pb2_grpc.SessionServiceStub:
        """The SessionService stub."""
        return self._stub(  # type: ignore[return-value]
            "sessions", self.sessions, session_service_pb2_grpc.SessionServiceStub
        )

    @property
    def task_service(self) -> task_service_pb2_grpc.TaskServiceStub:
        """The TaskService stub."""
        return self._stub("tasks", self.tasks, task_service_pb2_grpc.TaskServiceStub)  # type: ignore[return-value]

    async def close(self) -> None:
        """Close every channel opened."""
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        self._stubs.clear()
        self._by_name.clear()


_STUB_OF = {
    "runs": "run_service",
    "gateway": "gateway_service",
    "tools": "tool_service",
    "sessions": "session_service",
    "tasks": "task_service",
}
