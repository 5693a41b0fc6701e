"""The whole mesh as five processes (started by `start_mesh`, as `agentrt up` does), its gateway
pointed at the provider wire emulator, shared by the e2e tests of the session and reset before
each (shared_meshes.py says what a reset restores and what it leaves).

Fixtures: `emulated_mesh` (SQLite, no auth), `token_mesh` (every service requires the bearer
token MESH_TOKEN), `shared_chaos` (the crash tests' mesh on PostgreSQL; each crash module has a
`chaos` fixture that resets it with its own responder).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chaos_helpers import ChaosMesh, drop_databases, start_chaos_mesh
from e2e_helpers import MESH_TOKEN, emulator_env, free_port_map
from shared_meshes import end_unfinished_runs, run_async, runs_db_of

from agentrt.cli.up import Mesh, start_mesh
from tests.emulators.providers import ProviderEmulator
from tests.needs import unavailable
from tests.stores import pg_reachable


@dataclass
class EmulatedMesh:
    """A running mesh and the emulator its gateway calls."""

    mesh: Mesh
    emu: ProviderEmulator
    root: Path
    #: The bearer token every service requires ("" = none).
    token: str = ""

    @property
    def runs(self) -> str:
        return self.mesh.addresses["runs"]

    @property
    def sessions(self) -> str:
        return self.mesh.addresses["sessions"]

    def env(self) -> dict[str, str]:
        """Environment for a CLI subprocess talking to this mesh."""
        return self.mesh.client_env()

    def reset(self) -> None:
        """End every run an earlier test left unfinished, then make the emulator as new."""
        end_unfinished_runs(self.runs, runs_db_of(self.mesh.state_dir), self.token)
        self.emu.reset()


def _start_emulated(root: Path, token: str = "") -> Iterator[EmulatedMesh]:
    with ProviderEmulator() as emu:
        env = emulator_env(emu)
        if token:
            env["AGENTRT_AUTH_TOKEN"] = token
        mesh = start_mesh(root / "state", ports=free_port_map(), env=env)
        try:
            yield EmulatedMesh(mesh=mesh, emu=emu, root=root, token=token)
        finally:
            mesh.stop()


@pytest.fixture(scope="session")
def _emulated_mesh_of_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedMesh]:
    yield from _start_emulated(tmp_path_factory.mktemp("mesh"))


@pytest.fixture(scope="session")
def _token_mesh_of_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedMesh]:
    yield from _start_emulated(tmp_path_factory.mktemp("tokenmesh"), MESH_TOKEN)


@pytest.fixture
def emulated_mesh(_emulated_mesh_of_session: EmulatedMesh) -> EmulatedMesh:
    """The session's mesh without auth, reset for this test."""
    _emulated_mesh_of_session.reset()
    return _emulated_mesh_of_session


@pytest.fixture
def token_mesh(_token_mesh_of_session: EmulatedMesh) -> EmulatedMesh:
    """The session's mesh whose services all require the bearer token MESH_TOKEN, reset for this test."""
    _token_mesh_of_session.reset()
    return _token_mesh_of_session


@pytest.fixture(scope="session")
def shared_chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosMesh]:
    """The crash tests' mesh on fresh PostgreSQL databases (chaos_helpers), dropped at the end.

    A test takes it through its module's `chaos` fixture, which calls shared_meshes.reset_chaos.
    """
    if not run_async(pg_reachable):
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    emu = ProviderEmulator()
    try:
        mesh = start_chaos_mesh(tmp_path_factory.mktemp("chaos"), emu)
        try:
            yield mesh
        finally:
            mesh.close()
            run_async(lambda: drop_databases(mesh.databases))
    finally:
        emu.close()
