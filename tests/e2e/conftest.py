"""The whole mesh as five processes (started by `start_mesh`, as `agentrt up` does), its gateway
pointed at the provider wire emulator, shared by the tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_helpers import MESH_TOKEN, free_port_map

from agentrt.cli.up import Mesh, start_mesh
from tests.emulators.providers import ProviderEmulator


@dataclass
class EmulatedMesh:
    """A running mesh and the emulator its gateway calls."""

    mesh: Mesh
    emu: ProviderEmulator
    root: Path

    @property
    def runs(self) -> str:
        return self.mesh.addresses["runs"]

    @property
    def sessions(self) -> str:
        return self.mesh.addresses["sessions"]

    def env(self) -> dict[str, str]:
        """Environment for a CLI subprocess talking to this mesh."""
        return self.mesh.client_env()


def emulator_env(emu: ProviderEmulator) -> dict[str, str]:
    """The gateway's provider settings for the emulator (official SDKs, base URLs only)."""
    return {
        "AGENTRT_OPENAI_BASE_URL": emu.base_url + "/v1",
        "AGENTRT_OPENAI_API_KEY": "test-key",
        "AGENTRT_ANTHROPIC_BASE_URL": emu.base_url,
        "AGENTRT_ANTHROPIC_API_KEY": "test-key",
        # a scripted provider error should fail the run at once, not after backoff
        "AGENTRT_GATEWAY_MAX_RETRIES": "0",
    }


@pytest.fixture(scope="module")
def emulated_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedMesh]:
    root = tmp_path_factory.mktemp("mesh")
    with ProviderEmulator() as emu:
        mesh = start_mesh(root / "state", ports=free_port_map(), env=emulator_env(emu))
        try:
            yield EmulatedMesh(mesh=mesh, emu=emu, root=root)
        finally:
            mesh.stop()


@pytest.fixture(scope="module")
def token_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedMesh]:
    """A mesh like `emulated_mesh` whose services all require the bearer token MESH_TOKEN."""
    root = tmp_path_factory.mktemp("tokenmesh")
    with ProviderEmulator() as emu:
        env = {**emulator_env(emu), "AGENTRT_AUTH_TOKEN": MESH_TOKEN}
        mesh = start_mesh(root / "state", ports=free_port_map(), env=env)
        try:
            yield EmulatedMesh(mesh=mesh, emu=emu, root=root)
        finally:
            mesh.stop()
