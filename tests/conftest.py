"""Shared fixtures: start a production server on 127.0.0.1:0 and open a real channel.

Also how the suite splits over pytest-xdist workers (`make test` runs `-n 2`):
`pytest_xdist_make_scheduler`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from agentrt.mesh.server import MeshServer

ServerFactory = Callable[[MeshServer], Awaitable[str]]


#: The unit of work that holds every test under tests/e2e (see pytest_xdist_make_scheduler).
E2E_UNIT = "tests/e2e"


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """How `-n N` (with --dist load, the default, or loadgroup) splits the suite: by unit of work.

    A unit is every test under tests/e2e together, else one test file. The e2e unit is handed
    out first, so one worker starts on it at once and runs the e2e tests one after another
    (each starts processes, and several prove leases of 1.5 s: two meshes at once on 2 cores
    would starve each other), starting each session-wide mesh once; the other worker takes
    files of unit and service tests one by one, then both share what is left. A file stays on
    one worker, so a module-scoped fixture is set up once. (xdist's own loadgroup marks a group
    by rewriting `item._nodeid`, which pytest 9 no longer reads: grouping is done here instead.)

    Returns None for another --dist mode (xdist's own scheduler then).
    """
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return E2E_UNIT if path.startswith(E2E_UNIT + "/") else path

        def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
            if E2E_UNIT in self.workqueue:
                self.workqueue.move_to_end(E2E_UNIT, last=False)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    """Give the meshes' metrics endpoints ports from tests/ports.py's band.

    `start_mesh` (agentrt/cli/up.py) picks a free port per service for its metrics with
    `agentrt.cli.ports.free_ports`, which asks the OS for an ephemeral port: the child binds
    it about a second later, by which time an outgoing connection of this suite may hold it
    (exit 98). Within the tests, that choice comes from the band the tests' own ports come from.
    """
    import agentrt.cli.ports
    from tests import ports

    agentrt.cli.ports.free_ports = ports.free_ports


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
