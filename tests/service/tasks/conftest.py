"""Fixtures of the TaskService tests (helpers in harness.py): every mesh test runs on both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.emulators.providers import ProviderEmulator
from tests.service.runs.harness import drop_pg_databases
from tests.service.tasks.harness import BACKENDS, TaskMesh, task_mesh


@pytest.fixture
async def emulator() -> AsyncIterator[ProviderEmulator]:
    emu = ProviderEmulator()
    yield emu
    emu.close()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def tm(start_server, tmp_path, emulator, backend) -> TaskMesh:
    return await task_mesh(start_server, tmp_path, emulator, backend)


@pytest.fixture(autouse=True)
async def _drop_pg_databases() -> AsyncIterator[None]:
    yield
    await drop_pg_databases()
