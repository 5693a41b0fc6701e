"""Fixtures of the gateway service tests: the production build_server pointed at the emulator.

Fixtures only: helpers live in gateway_helpers.py (docs/decisions/0048-test-helpers-not-in-conftest.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from gateway_helpers import emulator_config

from agentrt.gateway.server import build_server
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ProviderEmulator


@pytest.fixture
def emu() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as emulator:
        yield emulator


@pytest.fixture
async def gateway(start_server, emu) -> AsyncIterator[pb_grpc.ModelGatewayServiceStub]:
    address = await start_server(build_server(emulator_config(emu)))
    async with grpc.aio.insecure_channel(address) as channel:
        yield pb_grpc.ModelGatewayServiceStub(channel)
