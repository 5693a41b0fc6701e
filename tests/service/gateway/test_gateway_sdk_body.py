"""The body a provider receives is the one the SDK's typed arguments would send (decision 0041).

The adapters pass their arguments to the official SDKs through `extra_body`, which skips the
SDKs' per-call transform of typed arguments (provider.sdk_kwargs). These tests send the same
arguments the other way, as the SDK's typed keyword arguments, to the same emulator, and
compare the two JSON bodies the emulator received: equal as JSON values (key order aside),
for every adapter, blocking and streamed, and for the token counters.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from agentrt.gateway.providers import anthropic_messages, openai_chat, openai_responses
from agentrt.gateway.providers.provider import Call
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply

MODELS = {"openai": "gpt-emu", "openai-chat": "chat-emu", "anthropic": "claude-emu"}
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def _request(provider: str) -> pb.ModelRequest:
    """A request with every kind of value the adapters render (text, image, calls, results, tools)."""
    call = c.ToolCall(call_id="call_1", name="read_file", arguments='{"path": "a.txt"}')
    result = c.ToolResult(call_id="call_1", name="read_file", content="héllo\n")
    image = c.ImageBlock(data=b"\x89PNG....", media_type="image/png")
    return pb.ModelRequest(
        model=c.ModelRef(provider=provider, model=MODELS[provider]),
        system="You are a test agent.",
        messages=[
            c.Message(
                role=c.ROLE_USER,
                content=[c.ContentBlock(text=c.TextBlock(text="Read a.txt")), c.ContentBlock(image=image)],
            ),
            c.Message(
                role=c.ROLE_ASSISTANT,
                content=[c.ContentBlock(text=c.TextBlock(text="Reading.")), c.ContentBlock(tool_use=call)],
            ),
            c.Message(role=c.ROLE_USER, content=[c.ContentBlock(tool_result=result)]),
        ],
        tools=[
            c.ToolSpec(
                name="read_file", description="Read a file.", parameters_json_schema=json.dumps(SCHEMA)
            )
        ],
        settings=c.ModelSettings(
            max_output_tokens=300,
            temperature=0.5,
            tool_choice=c.ToolChoice(mode=c.TOOL_CHOICE_MODE_AUTO),
            disable_parallel_tool_calls=True,
        ),
    )


def _typed_params(provider: str, request: pb.ModelRequest) -> dict[str, Any]:
    call = Call(request, MODELS[provider], 30.0)
    if provider == "openai":
        return openai_responses.build_params(call)
    if provider == "openai-chat":
        return openai_chat.build_params(call)
    return anthropic_messages.build_params(call, 4096)


async def _typed_call(emu, provider: str, params: dict[str, Any], streamed: bool) -> None:
    """Send params as the SDK's typed keyword arguments (its transform applies)."""
    if provider == "anthropic":
        client: Any = anthropic.AsyncAnthropic(api_key="test-key", base_url=emu.base_url, max_retries=0)
        create = client.messages.create
    else:
        client = openai.AsyncOpenAI(api_key="test-key", base_url=emu.base_url + "/v1", max_retries=0)
        create = client.responses.create if provider == "openai" else client.chat.completions.create
    try:
        if streamed:
            if provider == "openai-chat":
                params = {**params, "stream_options": {"include_usage": True}}
            async for _ in await create(**params, stream=True):
                pass
        else:
            await create(**params)
    finally:
        await client.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["blocking", "streamed"])
@pytest.mark.parametrize("provider", ["openai", "openai-chat", "anthropic"])
async def test_the_body_is_the_typed_sdk_calls_body(gateway, emu, provider, streamed):
    request = _request(provider)
    reply = Reply(tool_calls=[ToolCallReply("read_file", '{"path": "b.txt"}')])
    emu.script([reply, reply])
    if streamed:
        items = [item async for item in gateway.StreamGenerate(pb.StreamGenerateRequest(request=request))]
        assert items[-1].WhichOneof("event") == "final"
    else:
        await gateway.Generate(pb.GenerateRequest(request=request))
    path, sent = emu.requests[-1]

    await _typed_call(emu, provider, _typed_params(provider, request), streamed)
    typed_path, typed = emu.requests[-1]

    assert (path, sent) == (typed_path, typed)
    assert sent["stream"] is True if streamed else "stream" not in sent


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_token_count_body_is_the_typed_sdk_calls_body(gateway, emu, provider):
    request = _request(provider)
    counted = await gateway.CountTokens(pb.CountTokensRequest(request=request))
    assert counted.input_tokens > 0
    path, sent = emu.requests[-1]

    params = _typed_params(provider, request)
    if provider == "openai":
        keep = ("model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text")
        client: Any = openai.AsyncOpenAI(api_key="test-key", base_url=emu.base_url + "/v1", max_retries=0)
        count = client.responses.input_tokens.count
    else:
        keep = ("model", "messages", "system", "tools", "tool_choice")
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=emu.base_url, max_retries=0)
        count = client.messages.count_tokens
    try:
        await count(**{k: v for k, v in params.items() if k in keep})
    finally:
        await client.close()
    assert emu.requests[-1] == (path, sent)
