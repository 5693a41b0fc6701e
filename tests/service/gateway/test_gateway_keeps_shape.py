"""Issue 10 through the gateway's gRPC API: whatever a provider sends, a call keeps its shape.

Bad bytes (lone surrogates) in what a provider sends and in a conversation already stored,
the context-overflow wordings of the servers in the field, streamed parallel calls that a
compatible server numbers all 0, and the gateway's own encoding failures. Every provider's
exact bytes come from the wire emulator.
"""

from __future__ import annotations

import json

import grpc
import pytest
from gateway_helpers import REMOTE, calls, generate, model_request, user

from agentrt.gateway.errors import classify
from agentrt.gateway.metrics import error_origin
from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply

#: JSON text of arguments holding an escaped lone surrogate: valid JSON, valid UTF-8, no character.
ESCAPED = '{"path": "notes.txt", "content": "a\\ud99cb"}'
#: The same text after normalization: only the escape changed.
NORMALIZED = '{"path": "notes.txt", "content": "a\\ufffdb"}'
#: Text whose JSON (the emulator escapes it) decodes to a raw lone surrogate.
RAW_TEXT = "before \ud99c after"


def text_of(response: c.ModelResponse) -> str:
    return "".join(b.text.text for b in response.content if b.WhichOneof("block") == "text")


async def streamed(gateway, request: pb.ModelRequest) -> c.ModelResponse:
    items = [i async for i in gateway.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    assert items[-1].WhichOneof("event") == "final"
    return items[-1].final.response


# -- bad bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("provider", REMOTE)
@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_lone_surrogates_from_a_provider_are_normalized(gateway, emu, provider, streaming):
    # The text decodes to a raw lone surrogate; the arguments hold an escaped one.
    emu.script([Reply(text=RAW_TEXT, tool_calls=[ToolCallReply("write_file", ESCAPED)])])
    request = model_request(provider)
    if streaming:
        response = await streamed(gateway, request)
    else:
        response = (await gateway.Generate(pb.GenerateRequest(request=request))).response
    assert text_of(response) == "before \ufffd after"
    (call,) = calls(response)
    assert call.arguments == NORMALIZED and not call.invalid_arguments
    assert json.loads(call.arguments)["content"] == "a\ufffdb"
    assert len(emu.requests) == 1  # answered at once: nothing was blamed on the provider


@pytest.mark.parametrize("provider", REMOTE)
async def test_a_stored_lone_surrogate_still_reaches_the_provider(gateway, emu, provider):
    # A session written before the fix holds the escape; rendering it must still encode.
    history = [
        user("write notes.txt"),
        c.Message(
            role=c.ROLE_ASSISTANT,
            content=[
                c.ContentBlock(tool_use=c.ToolCall(call_id="call_1", name="write_file", arguments=ESCAPED))
            ],
        ),
        c.Message(
            role=c.ROLE_USER,
            content=[
                c.ContentBlock(tool_result=c.ToolResult(call_id="call_1", name="write_file", content="ok"))
            ],
        ),
    ]
    emu.script([Reply(text="done")])
    out = await gateway.Generate(generate(provider, *history))
    assert text_of(out.response) == "done" and out.retries == 0
    ((path, body),) = emu.requests
    sent = json.dumps(body, ensure_ascii=False)
    # Anthropic's `input` is an object (U+FFFD itself); OpenAI's arguments a string (its escape).
    assert "\ufffd" in sent or "\\\\ufffd" in sent
    assert "ud99c" not in sent.lower()


def test_the_gateways_own_encoding_failure_is_not_the_providers():
    try:
        "\ud99c".encode("utf-8")
    except UnicodeEncodeError as exc:
        err = classify(exc, "anthropic")
    assert (err.status, err.reason, err.retryable) == ("INTERNAL", "INTERNAL", False)
    assert err.metadata["origin"] == "gateway" and error_origin(err) == "gateway"
    assert "malformed response" not in err.message and "gateway" in err.message


# -- context overflow wordings -----------------------------------------------------------

OVERFLOWS = [
    "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300512 tokens.",
    "The input (5120 tokens) is longer than the model's context length (4096 tokens).",
    "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576).",
    "The total length of all messages is too long",
    "THE INPUT (9000 TOKENS) IS LONGER THAN THE MODEL'S CONTEXT LENGTH (8192 TOKENS).",
    "The decoder prompt (length 5000) is longer than the maximum model length of 4096.",
]


@pytest.mark.parametrize("provider", REMOTE)
@pytest.mark.parametrize(
    "message", OVERFLOWS, ids=["azure", "sglang", "gemini", "perplexity", "upper", "vllm"]
)
async def test_overflow_wordings_are_context_overflow(gateway, emu, provider, message):
    emu.script([ErrorReply(status=400, message=message, kind="invalid_request")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "CONTEXT_OVERFLOW", info.value.details()
    assert len(emu.requests) == 1


@pytest.mark.parametrize("provider", REMOTE)
async def test_streamed_overflow_wording_is_context_overflow(gateway, emu, provider):
    emu.script([ErrorReply(status=400, message=OVERFLOWS[0], kind="invalid_request")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in gateway.StreamGenerate(pb.StreamGenerateRequest(request=model_request(provider))):
            pass
    assert reason_of(info.value) == "CONTEXT_OVERFLOW"


@pytest.mark.parametrize("provider", REMOTE)
async def test_a_plain_400_stays_a_plain_400(gateway, emu, provider):
    bad_schema = (
        "Invalid schema for function 'search': In context=('properties', 'q'), 'additionalProperties' "
        "is required to be supplied and to be false."
    )
    emu.script([ErrorReply(status=400, message=bad_schema, kind="invalid_request")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await gateway.Generate(generate(provider))
    assert reason_of(info.value) == "INVALID_REQUEST"
    assert details_of(info.value)[1]["http_status"] == "400"


# -- streamed parallel calls -------------------------------------------------------------


async def test_streamed_parallel_calls_numbered_zero_stay_apart(gateway, emu):
    emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", '{"cmd":"alpha"}', id="call_alpha"),
                    ToolCallReply("exec_command", '{"cmd":"beta"}', id="call_beta"),
                ],
                tool_index_zero=True,
                chunk_chars=4,
            )
        ]
    )
    request = model_request("openai-chat")
    items = [i async for i in gateway.StreamGenerate(pb.StreamGenerateRequest(request=request))]
    final = items[-1].final.response
    got = [(t.provider_call_id, t.arguments) for t in calls(final)]
    assert got == [("call_alpha", '{"cmd":"alpha"}'), ("call_beta", '{"cmd":"beta"}')]
    deltas = [i.tool_call_delta for i in items if i.WhichOneof("event") == "tool_call_delta"]
    assert {d.index for d in deltas} == {0, 1}
    assert "".join(d.arguments_delta for d in deltas if d.index == 1) == '{"cmd":"beta"}'


async def test_streamed_fragments_without_ids_follow_their_index(gateway, emu):
    # The ordinary shape: the id on a call's first fragment only, the rest by index.
    emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", '{"cmd":"ls -la"}'),
                    ToolCallReply("exec_command", '{"cmd":"pwd"}'),
                ],
                chunk_chars=3,
            )
        ]
    )
    final = await streamed(gateway, model_request("openai-chat"))
    assert [t.arguments for t in calls(final)] == ['{"cmd":"ls -la"}', '{"cmd":"pwd"}']
