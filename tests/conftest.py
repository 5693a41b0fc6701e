"""Shared fixtures: start a production server on 127.0.0.1:0 and open a real channel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from agentrt.mesh.server import MeshServer

ServerFactory = Callable[[MeshServer], Awaitable[str]]


@pytest.fixture(scope="session")
def _one_ca_bundle(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CA file with the first certificate of the system bundle ("" when there is none)."""
    import ssl
    from pathlib import Path

    bundle = Path(ssl.get_default_verify_paths().openssl_cafile or "/nonexistent")
    text = bundle.read_text() if bundle.is_file() else ""
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    if begin not in text:
        return ""
    first = text[text.index(begin) : text.index(end, text.index(begin)) + len(end)]
    path = tmp_path_factory.mktemp("trust") / "one-ca.pem"
    path.write_text(first + "\n")
    return str(path)


@pytest.fixture(autouse=True)
def _small_trust_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, _one_ca_bundle: str):
    """Point SSL_CERT_FILE at a one-certificate bundle in unit and service tests.

    Every in-process gateway builds an HTTP client per provider, and each loads the system CA
    bundle (~140 certificates, 0.05-0.2 s) though the providers here are the plain-HTTP wire
    emulator: hundreds of gateway starts paid that for nothing. Nothing in these tests makes a
    verified TLS connection over HTTP (gRPC's TLS tests pass their own roots). The e2e tests
    keep the machine's store: they start one gateway per mesh and run scripts that may fetch.
    """
    if _one_ca_bundle and "e2e" not in request.node.path.parts:
        monkeypatch.setenv("SSL_CERT_FILE", _one_ca_bundle)


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
