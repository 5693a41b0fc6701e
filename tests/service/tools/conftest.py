"""Fixtures of the ToolService tests: the production build_server on 127.0.0.1:0."""

from __future__ import annotations

import grpc
import pytest
from tools_helpers import ToolsEnv, make_config

from agentrt.tools.server import build_server
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc


@pytest.fixture
async def tools(start_server, tmp_path) -> ToolsEnv:
    config = make_config(tmp_path)
    address = await start_server(build_server(config))
    workspace = tmp_path / "ws"
    async with grpc.aio.insecure_channel(address) as channel:
        yield ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, workspace)
