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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request) -> str:
    """Where runs and sessions keep their tables: "sqlite" or "postgres" (fresh databases)."""
    return request.param


@pytest.fixture
async def store_mesh(start_server, tmp_path, emulator, backend) -> Mesh:
    """The mesh with runs and sessions on the `backend` (both SQLite and PostgreSQL)."""
    return await start_mesh(start_server, tmp_path, emulator, pg=backend == "postgres")


@pytest.fixture(autouse=True)
async def _drop_pg_databases() -> AsyncIterator[None]:
    # Autouse fixtures are set up first, so this tears down after the servers have stopped.
    yield
    await drop_pg_databases()
