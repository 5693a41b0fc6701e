"""Long-lived gRPC channels to mesh services, with bearer token and tenant metadata.

One channel per peer for the life of the process (HTTP/2 multiplexes every call), so a
turn pays no connection setup. `MeshClient` bundles the five stubs; any of its addresses
may be empty when the caller does not need that service.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from agentrt.client.metadata import metadata_interceptors
from agentrt.mesh.config import MAX_REQUEST_BYTES
from agentrt.mesh.context import TENANT_HEADER
from agentrt.v1 import (
    gateway_service_pb2_grpc,
    run_service_pb2_grpc,
    session_service_pb2_grpc,
    task_service_pb2_grpc,
    tool_service_pb2_grpc,
)


def open_channel(target: str, *, token: str = "", tenant: str = "") -> grpc.aio.Channel:
    """Open a long-lived insecure channel to "host:port" with auth/tenant metadata.

    Args:
        target: "host:port" of the service.
        token: bearer token sent as `authorization: Bearer <token>`; "" sends none.
        tenant: tenant sent as `x-agentrt-tenant`; "" sends none (the server's default).
    """
    pairs: list[tuple[str, str]] = []
    if token:
        pairs.append(("authorization", f"Bearer {token}"))
    if tenant:
        pairs.append((TENANT_HEADER, tenant))
    options = [
        ("grpc.max_receive_message_length", MAX_REQUEST_BYTES * 2),
        ("grpc.max_send_message_length", MAX_REQUEST_BYTES * 2),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.enable_retries", 1),
    ]
    # Token and tenant on every call kind, client-streaming ones included (client/metadata.py).
    interceptors = metadata_interceptors(pairs)
    return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)


@dataclass
class MeshClient:
    """Stubs of the mesh services over long-lived channels.

    Attributes:
        runs, gateway, tools, sessions, tasks: "host:port" of each service ("" = unused).
        token: bearer token; tenant: the tenant every call is scoped to.
    """

    runs: str = ""
    gateway: str = ""
    tools: str = ""
    sessions: str = ""
    tasks: str = ""
    token: str = ""
    tenant: str = ""
    _channels: list[grpc.aio.Channel] = field(default_factory=list, init=False)

    def _channel(self, target: str, name: str) -> grpc.aio.Channel:
        if not target:
            raise ValueError(f"no address configured for the {name} service")
        channel = open_channel(target, token=self.token, tenant=self.tenant)
        self._channels.append(channel)
        return channel

    def __post_init__(self) -> None:
        self._stubs: dict[str, object] = {}

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
