"""Contract items per adapter, checked on the wire: images, replayed reasoning and raw blocks,
structured output, sampling parameters a model rejects, parallel tool calls, malformed bodies,
and cancellation of a blocking call (seed 002 "Provider Adapters", "Provider Capability Differences").
"""

from __future__ import annotations

import asyncio
import base64
import json

import grpc
import pytest
from gateway_helpers import REMOTE, generate, model_request, user

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply

PNG = b"\x89PNG\r\n\x1a\n fake image bytes"
PNG_B64 = base64.b64encode(PNG).decode()


def body(emu, index: int = 0) -> dict:
    return emu.requests[index][1]


def assistant(*blocks: c.ContentBlock) -> c.Message:
    return c.Message(role=c.ROLE_ASSISTANT, content=list(blocks))


async def poll(check, limit: int = 500) -> None:
    for _ in range(limit):  # bounded poll for an observable state
        if check():
            return
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------- images


@pytest.mark.parametrize("provider", REMOTE)
async def test_image_blocks_reach_each_provider_in_its_shape(gateway, emu, provider):
    message = c.Message(
        role=c.ROLE_USER,
        content=[
            c.ContentBlock(text=c.TextBlock(text="what is in these?")),
            c.ContentBlock(image=c.ImageBlock(media_type="image/png", data=PNG)),
            c.ContentBlock(image=c.ImageBlock(url="https://example.test/cat.jpg")),
            c.ContentBlock(image=c.ImageBlock(url=f"data:image/webp;base64,{PNG_B64}")),
        ],
    )
    emu.script([Reply(text="a cat")])
    await gateway.Generate(generate(provider, message, tools=False))
    sent = body(emu)
    if provider == "openai":
        parts = sent["input"][0]["content"]
        assert [p["type"] for p in parts] == ["input_text", "input_image", "input_image", "input_image"]
        assert [p["image_url"] for p in parts[1:]] == [
            f"data:image/png;base64,{PNG_B64}",
            "https://example.test/cat.jpg",
            f"data:image/webp;base64,{PNG_B64}",
        ]
    elif provider == "openai-chat":
        parts = next(m for m in sent["messages"] if m["role"] == "user")["content"]
        assert [p["type"] for p in parts] == ["text", "image_url", "image_url", "image_url"]
        assert parts[1]["image_url"]["url"] == f"data:image/png;base64,{PNG_B64}"
        assert parts[2]["image_url"]["url"] == "https://example.test/cat.jpg"
    else:
        parts = sent["messages"][0]["content"]
        assert [p["type"] for p in parts] == ["text", "image", "image", "image"]
        assert parts[1]["source"] == {"type": "base64", "media_type": "image/png", "data": PNG_B64}
        assert parts[2]["source"] == {"type": "url", "url": "https://example.test/cat.jpg"}
        # Anthropic fetches http(s) only: a data URL travels as its base64 payload
        assert parts[3]["source"] == {"type": "base64", "media_type": "image/webp", "data": PNG_B64}


@pytest.mark.parametrize(
    "image",
    [
        c.ImageBlock(media_type="image/png"),  # neither data nor url
        c.ImageBlock(media_type="image/png", data=PNG, url="https://example.test/a.png"),  # both
        c.ImageBlock(data=PNG),  # inline bytes without their type
        c.ImageBlock(media_type="image/tiff", data=PNG),  # a type no provider takes
        c.ImageBlock(url="file:///etc/passwd"),
        c.ImageBlock(url="data:image/svg+xml,<svg/>"),
    ],
    ids=["empty", "both", "no-type", "tiff", "file-url", "svg-data-url"],
)
async def test_bad_images_are_rejected_before_any_call(gateway, emu, image):
    message = c.Message(role=c.ROLE_USER, content=[c.ContentBlock(image=image)])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate("anthropic", message))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "INVALID_VALUE"
    assert emu.requests == []


# ---------------------------------------------------------------- reasoning and raw blocks


async def test_streamed_signed_thinking_is_replayed_exactly(gateway, emu):
    emu.script([Reply(text="answer", thinking="step one, then two", chunk_chars=3), Reply(text="next")])
    items = [
        i async for i in gateway.StreamGenerate(pb.StreamGenerateRequest(request=model_request("anthropic")))
    ]
    assert "".join(i.thinking_delta for i in items) == "step one, then two"
    first = items[-1].final.response
    thinking = first.content[0].thinking
    assert thinking.text == "step one, then two" and thinking.signature.startswith("sig_")
    await gateway.Generate(generate("anthropic", user("q"), assistant(*first.content), user("go on")))
    replayed = body(emu, 1)["messages"][1]["content"]
    assert replayed[0] == {
        "type": "thinking",
        "thinking": "step one, then two",
        "signature": thinking.signature,
    }


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_redacted_thinking_is_kept_and_replayed_verbatim(gateway, emu, streamed):
    emu.script([Reply(text="ok", redacted_thinking="EmwKAhgBEgy3va3pzix/LafPsn4a"), Reply(text="next")])
    if streamed:
        request = pb.StreamGenerateRequest(request=model_request("anthropic"))
        first = [i async for i in gateway.StreamGenerate(request)][-1].final.response
    else:
        first = (await gateway.Generate(generate("anthropic"))).response
    block = first.content[0].thinking
    assert block.redacted and block.data == "EmwKAhgBEgy3va3pzix/LafPsn4a"
    await gateway.Generate(generate("anthropic", user("q"), assistant(*first.content), user("go on")))
    replayed = body(emu, 1)["messages"][1]["content"]
    assert replayed[0] == {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


async def test_raw_blocks_go_back_only_to_their_own_provider(gateway, emu):
    server_tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-opaque"}
    history = [
        user("search"),
        assistant(
            c.ContentBlock(
                raw=c.RawBlock(provider="anthropic", type="server_tool_use", json=json.dumps(server_tool))
            ),
            c.ContentBlock(raw=c.RawBlock(provider="openai", type="reasoning", json=json.dumps(reasoning))),
            c.ContentBlock(text=c.TextBlock(text="found it")),
        ),
        user("thanks"),
    ]
    emu.script([Reply(text="a"), Reply(text="b")])
    await gateway.Generate(generate("anthropic", *history))
    await gateway.Generate(generate("openai", *history))
    assert body(emu, 0)["messages"][1]["content"] == [server_tool, {"type": "text", "text": "found it"}]
    openai_items = body(emu, 1)["input"]
    assert reasoning in openai_items
    assert not any(item.get("type") == "server_tool_use" for item in openai_items)


async def test_openai_reasoning_is_asked_encrypted_and_replayed_exactly(gateway, emu):
    emu.script(
        [Reply(text="42", thinking="think hard", encrypted_reasoning="gAAAAB-encrypted"), Reply(text="ok")]
    )
    request = generate("openai", temperature=0.3)
    request.request.model.model = "o4-mini"
    first = (await gateway.Generate(request)).response
    sent = body(emu, 0)
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert "temperature" not in sent  # reasoning models reject sampling parameters
    raw = next(b.raw for b in first.content if b.WhichOneof("block") == "raw")
    assert raw.type == "reasoning" and json.loads(raw.json)["encrypted_content"] == "gAAAAB-encrypted"
    follow = generate("openai", user("q"), assistant(*first.content), user("and?"))
    follow.request.model.model = "o4-mini"
    await gateway.Generate(follow)
    replayed = next(i for i in body(emu, 1)["input"] if i.get("type") == "reasoning")
    assert replayed == json.loads(raw.json)


# ---------------------------------------------------------------- structured output

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "confidence": {"type": ["number", "null"]},  # optional, admits null
        "sources": {
            "type": "array",
            "items": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        },
    },
    "required": ["answer", "sources"],
}


@pytest.mark.parametrize("provider", REMOTE)
async def test_structured_output_in_each_provider_shape(gateway, emu, provider):
    emu.script([Reply(text='{"answer": "yes"}')])
    await gateway.Generate(generate(provider, tools=False, output_json_schema=json.dumps(SCHEMA)))
    sent = body(emu)
    if provider == "openai":
        fmt = sent["text"]["format"]
        assert (fmt["type"], fmt["strict"]) == ("json_schema", True)
        schema = fmt["schema"]  # strict projection: objects closed, every property required
        assert schema["required"] == ["answer", "confidence", "sources"]
        assert schema["additionalProperties"] is False
        assert schema["properties"]["confidence"] == {"type": ["number", "null"]}
        items = schema["properties"]["sources"]["items"]
        assert items["additionalProperties"] is False and items["required"] == ["url"]
    elif provider == "openai-chat":
        assert sent["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": SCHEMA},
        }
    else:
        schema = sent["output_config"]["format"]["schema"]
        assert sent["output_config"]["format"]["type"] == "json_schema"
        assert schema["additionalProperties"] is False and schema["required"] == ["answer", "sources"]
        assert schema["properties"]["sources"]["items"]["additionalProperties"] is False


@pytest.mark.parametrize("provider", ["openai-chat", "anthropic"])
async def test_tools_with_structured_output_are_sent_where_the_provider_allows(gateway, emu, provider):
    emu.script([Reply(text='{"answer": "yes"}')])
    await gateway.Generate(generate(provider, output_json_schema=json.dumps(SCHEMA)))
    sent = body(emu)
    assert len(sent["tools"]) == 2
    assert ("response_format" if provider == "openai-chat" else "output_config") in sent


async def test_openai_refuses_tools_with_structured_output_on_every_rpc(gateway, emu):
    request = model_request("openai", output_json_schema=json.dumps(SCHEMA))
    with pytest.raises(grpc.aio.AioRpcError) as streamed:
        async for _ in gateway.StreamGenerate(pb.StreamGenerateRequest(request=request)):
            pass
    with pytest.raises(grpc.aio.AioRpcError) as counted:
        await gateway.CountTokens(pb.CountTokensRequest(request=request))
    for error in (streamed.value, counted.value):
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(error) == "UNSUPPORTED_CAPABILITY"
    assert emu.requests == []


@pytest.mark.parametrize(
    ("provider", "schema", "words"),
    [
        (
            "openai",
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
            "open object",
        ),
        ("openai", {"type": "array", "items": {"type": "string"}}, "at the root"),
        ("openai", {"type": "object", "properties": {"n": {"type": "integer"}}}, "'n' is optional"),
        (
            "openai",
            {
                "type": "object",
                "properties": {"v": {"oneOf": [{"type": "number"}, {"type": "integer"}]}},
                "required": ["v"],
            },
            "oneOf branches overlap",
        ),
        (
            "anthropic",
            {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "open object",
        ),
    ],
    ids=[
        "openai-open-object",
        "openai-array-root",
        "openai-optional-not-nullable",
        "openai-overlapping-oneof",
        "anthropic-open-object",
    ],
)
async def test_output_schemas_the_provider_cannot_keep_are_refused(gateway, emu, provider, schema, words):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider, tools=False, output_json_schema=json.dumps(schema)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "UNSUPPORTED_CAPABILITY"
    assert words in (info.value.details() or "")
    assert emu.requests == []


# ---------------------------------------------------------------- sampling and parallel tool calls


@pytest.mark.parametrize(
    ("provider", "model", "accepted"),
    [
        ("openai", "gpt-4.1-mini", True),
        ("openai", "o3", False),
        ("openai", "gpt-5-mini", False),
        ("openai-chat", "llama-3.1-8b-instruct", True),
        ("openai-chat", "gpt-5", False),
        ("anthropic", "claude-sonnet-4-6", True),
        ("anthropic", "claude-opus-4-7", False),
        ("anthropic", "claude-haiku-5-0", False),
    ],
)
async def test_sampling_parameters_the_model_rejects_are_omitted(gateway, emu, provider, model, accepted):
    emu.script([Reply(text="ok")])
    request = generate(provider, temperature=0.25, top_p=0.5, max_output_tokens=64)
    request.request.model.model = model
    await gateway.Generate(request)
    sent = body(emu)
    assert sent["model"] == model
    if accepted:
        assert (sent["temperature"], sent["top_p"]) == (0.25, 0.5)
    else:
        assert "temperature" not in sent and "top_p" not in sent
    if provider == "openai-chat":  # OpenAI reasoning models refuse max_tokens on Chat Completions
        key = "max_tokens" if accepted else "max_completion_tokens"
        assert sent[key] == 64 and len({"max_tokens", "max_completion_tokens"} & set(sent)) == 1


@pytest.mark.parametrize("provider", REMOTE)
async def test_parallel_tool_calls_are_switched_off_only_when_asked(gateway, emu, provider):
    emu.script([Reply(text="a"), Reply(text="b")])
    await gateway.Generate(generate(provider))
    required = c.ToolChoice(mode=c.TOOL_CHOICE_MODE_REQUIRED)
    await gateway.Generate(generate(provider, disable_parallel_tool_calls=True, tool_choice=required))
    default, single = body(emu, 0), body(emu, 1)
    if provider == "anthropic":
        assert "tool_choice" not in default
        assert single["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    else:
        assert "parallel_tool_calls" not in default
        assert single["parallel_tool_calls"] is False and single["tool_choice"] == "required"


# ---------------------------------------------------------------- malformed bodies and cancellation


@pytest.mark.parametrize("provider", REMOTE)
async def test_malformed_body_is_unavailable_and_retried(gateway, emu, provider):
    emu.script([Reply(text="cut in half", body_malformed=True), Reply(text="whole")])
    out = await gateway.Generate(generate(provider))
    assert out.retries == 1 and out.response.content[0].text.text == "whole"
    emu.script([Reply(text="cut in half", body_malformed=True)] * 3)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(info.value) == "PROVIDER_UNAVAILABLE"


@pytest.mark.parametrize("provider", REMOTE)
async def test_client_cancel_of_generate_closes_the_provider_request(gateway, emu, provider):
    emu.script([Reply(text="too late", reply_delay=20)])
    call = gateway.Generate(generate(provider))
    await poll(lambda: len(emu.requests) == 1)
    assert len(emu.requests) == 1  # the provider has the request and is still thinking
    call.cancel()
    await poll(lambda: emu.aborted_requests == 1)
    assert emu.aborted_requests == 1  # the emulator saw the gateway hang up


@pytest.mark.parametrize("provider", REMOTE)
async def test_a_complete_call_and_a_truncated_one_in_one_blocking_response(gateway, emu, provider):
    # The non-streaming twin of the streamed case: the decision carries neither call.
    emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", '{"cmd": "ls"}'),
                    ToolCallReply("write_file", '{"pa'),
                ],
                stop="max_tokens",
            )
        ]
    )
    r = (await gateway.Generate(generate(provider))).response
    assert r.stop_reason == c.STOP_REASON_MAX_TOKENS
    assert [b.WhichOneof("block") for b in r.content] == []
