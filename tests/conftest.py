"""Shared fixtures: start a production server on 127.0.0.1:0 and open a real channel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from agentrt.mesh.server import MeshServer

ServerFactory = Callable[[MeshServer], Awaitable[str]]


@pytest.fixture
async def start_server() -> AsyncIterator[ServerFactory]:
    """Start MeshServers (production build_server output) and stop them after the test.

    Returns a coroutine function: `address = await start_server(mesh_server)`.
    """
    started: list[MeshServer] = []

    async def start(server: MeshServer) -> str:
        port = await server.start()
        started.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in reversed(started):
        await server.stop(grace=0)


def rpc_error_reason(error: grpc.RpcError) -> str:
    """Return the ErrorInfo reason of a failed call."""
    from agentrt.mesh.status import reason_of

    return reason_of(error)
