"""Helpers shared by the gateway service tests: the emulator's config and request builders.

Test modules import these from here, never from conftest.py (fixtures only): with several
test directories in one pytest call, `conftest` in sys.modules may be another directory's
(docs/decisions/0048-test-helpers-not-in-conftest.md).
"""

from __future__ import annotations

from dataclasses import replace

from agentrt.gateway.config import GatewayConfig, LocalSettings, ProviderSettings
from agentrt.mesh.config import ServerConfig
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import ProviderEmulator

#: The remote adapters every behavior test runs against.
REMOTE = ["openai", "openai-chat", "anthropic"]

EXEC_SCHEMA = '{"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}'


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


def user(text: str) -> c.Message:
    return c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text=text))])


def model_request(
    provider: str, *messages: c.Message, tools: bool = True, **settings: object
) -> pb.ModelRequest:
    request = pb.ModelRequest(
        model=c.ModelRef(provider=provider),
        system="You are a test agent.",
        messages=list(messages) or [user("write out.txt")],
        settings=c.ModelSettings(**settings),  # type: ignore[arg-type]
    )
    if tools:
        request.tools.add(
            name="exec_command", description="Run a command.", parameters_json_schema=EXEC_SCHEMA
        )
        request.tools.add(name="write_file", description="Write a file.")
    return request


def generate(provider: str, *messages: c.Message, **kw: object) -> pb.GenerateRequest:
    return pb.GenerateRequest(request=model_request(provider, *messages, **kw))


def kinds(response: c.ModelResponse) -> list[str]:
    return [b.WhichOneof("block") or "" for b in response.content]


def calls(response: c.ModelResponse) -> list[c.ToolCall]:
    return [b.tool_use for b in response.content if b.WhichOneof("block") == "tool_use"]
