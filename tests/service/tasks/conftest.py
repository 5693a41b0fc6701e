"""Fixtures of the TaskService tests (helpers in harness.py): every mesh test runs on both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from agentrt.tasks.server import build_server
from agentrt.v1 import task_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ProviderEmulator
from tests.service.runs.harness import drop_pg_databases, start_mesh
from tests.service.tasks.harness import BACKENDS, TaskMesh, tasks_config, tasks_db_url


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
    mesh = await start_mesh(start_server, tmp_path, emulator)
    db_url = await tasks_db_url(backend, mesh.tmp)
    server = build_server(tasks_config(mesh, db_url))
    address = await start_server(server)
    stub = pb_grpc.TaskServiceStub(grpc.aio.insecure_channel(address))
    return TaskMesh(mesh, stub, server, address, db_url, start_server)


@pytest.fixture(autouse=True)
async def _drop_pg_databases() -> AsyncIterator[None]:
    yield
    await drop_pg_databases()
