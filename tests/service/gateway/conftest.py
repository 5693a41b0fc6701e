"""Fixtures of the gateway service tests: the production build_server pointed at the emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import grpc
import pytest

from agentrt.gateway.config import GatewayConfig, LocalSettings, ProviderSettings
from agentrt.gateway.server import build_server
from agentrt.mesh.config import ServerConfig
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ProviderEmulator

#: The remote adapters every behavior test runs against.
REMOTE = ["openai", "openai-chat", "anthropic"]


def emulator_config(emu: ProviderEmulator, *, metrics_port: int = 0, **overrides: object) -> GatewayConfig:
    """Return a GatewayConfig whose remote providers all point at emu (local off).

    metrics_port: the server's /metrics port (0 = none).
    """
    openai = ProviderSettings(
        enabled=True, api_key="test-key", base_url=emu.base_url + "/v1", default_model="gpt-emu"
    )
    config = GatewayConfig(
        server=ServerConfig(port=0, metrics_port=metrics_port),
        openai=openai,
        openai_chat=replace(openai, default_model="chat-emu"),
        anthropic=ProviderSettings(True, "test-key", emu.base_url, "claude-emu"),
        local=LocalSettings(model_path=""),
        default_model="openai:gpt-emu",
        initial_backoff_seconds=0.01,
        max_backoff_seconds=0.05,
    )
    return replace(config, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def emu() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as emulator:
        yield emulator


@pytest.fixture
async def gateway(start_server, emu) -> AsyncIterator[pb_grpc.ModelGatewayServiceStub]:
    address = await start_server(build_server(emulator_config(emu)))
    async with grpc.aio.insecure_channel(address) as channel:
        yield pb_grpc.ModelGatewayServiceStub(channel)
