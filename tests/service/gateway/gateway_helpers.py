"""Request builders shared by the gateway service tests."""

from __future__ import annotations

from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb

EXEC_SCHEMA = '{"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}'


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
