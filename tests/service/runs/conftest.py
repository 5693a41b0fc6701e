"""Fixtures of the RunService tests (helpers in harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.emulators.providers import ProviderEmulator
from tests.service.runs.harness import Mesh, drop_pg_databases, start_mesh


@pytest.fixture
async def emulator() -> AsyncIterator[ProviderEmulator]:
    emu = ProviderEmulator()
    yield emu
    emu.close()


@pytest.fixture
async def mesh(start_server, tmp_path, emulator) -> Mesh:
    return await start_mesh(start_server, tmp_path, emulator)


@pytest.fixture(autouse=True)
async def _drop_pg_databases() -> AsyncIterator[None]:
    # Autouse fixtures are set up first, so this tears down after the servers have stopped.
    yield
    await drop_pg_databases()
