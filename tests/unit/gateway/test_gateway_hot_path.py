"""The pieces decision 0041 changed on the gateway's hot path: each says what it said before."""

from __future__ import annotations

import hashlib
import json

import pytest

from agentrt.core.errors import MeshError
from agentrt.gateway import validation
from agentrt.gateway.journal.flight import fingerprint, joined
from agentrt.gateway.limiter import AdaptiveTokenLimiter, LimiterKey, LimiterSettings
from agentrt.gateway.limiter.memory import MemoryStore
from agentrt.gateway.metrics import CallLabels, GatewayMetrics
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g


def text(t: str) -> g.StreamGenerateResponse:
    return g.StreamGenerateResponse(text_delta=t)


def thinking(t: str) -> g.StreamGenerateResponse:
    return g.StreamGenerateResponse(thinking_delta=t)


def tool(index: int, name: str, args: str) -> g.StreamGenerateResponse:
    return g.StreamGenerateResponse(
        tool_call_delta=g.ToolCallDelta(index=index, name=name, arguments_delta=args)
    )


def test_joined_keeps_what_a_reader_reads_in_fewer_messages():
    items = [
        thinking("let me "),
        thinking("see"),
        text("Hel"),
        text("lo"),
        tool(0, "read_file", ""),
        tool(0, "", '{"path"'),
        tool(0, "", ': "a"}'),
        tool(1, "read_file", '{"pa'),
        tool(1, "", 'th": "b"}'),
        text("!"),
    ]
    out = joined(items)
    assert out == [
        thinking("let me see"),
        text("Hello"),
        tool(0, "read_file", '{"path": "a"}'),
        tool(1, "read_file", '{"path": "b"}'),
        text("!"),
    ]
    # the originals are untouched, and a run of one is the item itself
    assert items[2] == text("Hel")
    single = [text("x")]
    assert joined(single)[0] is single[0]
    assert joined([]) == []


def test_joined_never_merges_a_new_call_into_the_one_before():
    # A fragment that names a tool opens a call, even at the same index (some servers
    # number parallel calls all 0).
    items = [tool(0, "a", "{}"), tool(0, "b", "{}"), tool(0, "", "")]
    assert joined(items) == [tool(0, "a", "{}"), tool(0, "b", "{}")]


def test_fingerprint_leaves_the_request_as_it_was():
    request = g.ModelRequest(
        model=c.ModelRef(provider="openai", model="m"),
        messages=[c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text="hi"))])],
        tenant="acme",
        idempotency_key="run/turn-1/ctx-1-e1",
    )
    request.max_queue_wait.FromSeconds(3)
    before = request.SerializeToString(deterministic=True)
    copy = g.ModelRequest()
    copy.CopyFrom(request)
    copy.idempotency_key, copy.tenant = "", ""
    copy.ClearField("max_queue_wait")
    want = hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()
    assert fingerprint(request) == want
    assert request.SerializeToString(deterministic=True) == before
    other = g.ModelRequest()
    other.CopyFrom(request)
    other.tenant, other.idempotency_key = "other", "k2"
    other.ClearField("max_queue_wait")
    assert fingerprint(other) == want


def _request(schema: str = '{"type": "object"}', arguments: str = '{"a": 1}') -> g.ModelRequest:
    call = c.ToolCall(call_id="c1", name="t", arguments=arguments)
    return g.ModelRequest(
        messages=[
            c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text="hi"))]),
            c.Message(role=c.ROLE_ASSISTANT, content=[c.ContentBlock(tool_use=call)]),
        ],
        tools=[c.ToolSpec(name="t", parameters_json_schema=schema)],
    )


def _refusal(request: g.ModelRequest) -> tuple[str, str, str]:
    with pytest.raises(MeshError) as caught:
        validation.validate_request(request)
    return str(caught.value.reason), caught.value.message, caught.value.metadata.get("field", "")


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [
        ("[1, 2]", '{"a": 1}'),  # a schema that is JSON but not an object
        ('{"type": ', '{"a": 1}'),  # a schema that is not JSON
        ('{"type": "object"}', "{"),  # arguments that are not JSON
        ('{"type": "object"}', "[" * 70 + "]" * 70),  # arguments nested too deep
    ],
)
def test_a_refused_json_text_is_refused_the_same_way_every_time(schema, arguments):
    first = _refusal(_request(schema, arguments))
    assert _refusal(_request(schema, arguments)) == first


def test_a_text_cached_as_json_is_still_no_object_where_an_object_is_needed():
    # Valid JSON, remembered when it passed as arguments; as a schema it must be an object.
    validation.validate_request(_request(arguments="[1, 2, 3]"))
    reason, _, field = _refusal(_request(schema="[1, 2, 3]"))
    assert (reason, field) == ("INVALID_JSON", "tools[0].parameters_json_schema")


def test_remembered_texts_still_count_against_the_value_limit():
    # Each schema is 4,003 values (short enough to be remembered): with one value per tool
    # and four for the messages, 24 tools pass and 25 are more than a request may hold.
    schema = json.dumps({"type": "object", "enum": [0] * 4_000})
    assert len(schema) <= validation.JSON_CACHE_MAX_CHARS
    request = _request(schema=schema)
    validation.validate_request(request)  # remembered now
    del request.tools[:]
    request.tools.extend(c.ToolSpec(name=f"t{i}", parameters_json_schema=schema) for i in range(25))
    reason, message, _ = _refusal(request)
    assert reason == "REQUEST_TOO_LARGE" and "values" in message
    del request.tools[24:]
    validation.validate_request(request)


def test_the_cache_is_bounded():
    for i in range(validation.JSON_CACHE_ENTRIES + 10):
        validation.validate_request(_request(arguments=json.dumps({"i": i})))
    assert validation._json_shape.cache_info().currsize == validation.JSON_CACHE_ENTRIES
    hits = validation._json_shape.cache_info().hits
    long_text = json.dumps({"x": "y" * validation.JSON_CACHE_MAX_CHARS})
    for _ in range(2):
        validation.validate_request(_request(arguments=long_text))  # too long to remember
    assert validation._json_shape.cache_info().hits == hits + 2  # the schema's, not the text's


async def test_limiter_entry_ids_are_unique_per_limiter_and_reservation():
    settings = LimiterSettings(initial_tokens=10**9, max_tokens=10**9, floor_tokens=10)
    limiters = [AdaptiveTokenLimiter(MemoryStore(settings), settings) for _ in range(2)]
    key = LimiterKey("acme", "openai", "gpt-x")
    ids = {(await lim.reserve(key, 5, 1.0)).entry_id for lim in limiters for _ in range(50)}
    assert len(ids) == 100 and all(len(i) <= 64 for i in ids)


def test_metrics_count_answers_as_before():
    metrics = GatewayMetrics()
    labels = CallLabels("acme", "openai", "gpt-x")
    answer = g.GenerateResponse(
        response=c.ModelResponse(usage=c.Usage(input_tokens=7, output_tokens=3, cached_input_tokens=2))
    )
    answer.queue_wait.FromMilliseconds(20)
    for _ in range(3):
        metrics.record_answer(labels, "StreamGenerate", answer)
    text_ = metrics.exposition().decode()
    assert (
        'agentrt_gateway_requests_total{model="gpt-x",outcome="ok",provider="openai",'
        'rpc="StreamGenerate",tenant="acme"} 3.0'
    ) in text_
    assert 'agentrt_gateway_input_tokens_total{model="gpt-x",provider="openai",tenant="acme"} 21.0' in text_
    assert 'agentrt_gateway_limiter_queue_wait_seconds_count{model="gpt-x",provider="openai"} 3.0' in text_
    assert 'agentrt_gateway_limiter_queue_wait_seconds_sum{model="gpt-x",provider="openai"} 0.06' in text_
