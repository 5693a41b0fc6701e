"""The capability table: which models take sampling parameters, strict and closed output schemas."""

from __future__ import annotations

import json

import pytest

from agentrt.core.errors import MeshError
from agentrt.gateway import capabilities as caps
from agentrt.v1 import common_pb2 as c


@pytest.mark.parametrize(
    ("model", "reasoning"),
    [
        ("o1", True),
        ("o3-mini", True),
        ("o4-mini-2025-04-16", True),
        ("gpt-5", True),
        ("gpt-5.1-codex", True),
        ("openai/o3", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4o", False),
        ("gpt-4.1-mini", False),
        ("omni-moderation-latest", False),
        ("llama-3.1-8b-instruct", False),
    ],
)
def test_openai_reasoning_models(model, reasoning):
    assert caps.openai_reasoning_model(model) is reasoning


@pytest.mark.parametrize(
    ("model", "rejects"),
    [
        ("claude-opus-4-7", True),
        ("claude-opus-4-8", True),
        ("claude-opus-4-10-20270101", True),
        ("anthropic.claude-opus-4-7-v1:0", True),
        ("claude-sonnet-5", True),
        ("claude-sonnet-5-5", True),
        ("claude-haiku-5-5", True),
        ("claude-fable-5-1", True),
        ("claude-mythos-preview", True),
        ("claude-opus-4-6", False),
        ("claude-opus-4-20250514", False),  # a date is not a minor version
        ("claude-sonnet-4-6", False),
        ("claude-haiku-4-5-20251001", False),
        ("claude-3-5-sonnet-20241022", False),
        ("claude-emu", False),
    ],
)
def test_claude_models_that_reject_sampling(model, rejects):
    assert caps.anthropic_rejects_sampling(model) is rejects


def _required(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties)}


def test_sampling_keeps_only_what_was_set():
    settings = c.ModelSettings(temperature=0.0)
    assert caps.sampling(settings, accepted=True) == {"temperature": 0.0}
    assert caps.sampling(c.ModelSettings(temperature=1.0, top_p=0.9), accepted=False) == {}
    assert caps.sampling(c.ModelSettings(), accepted=True) == {}


def test_strict_projection_closes_objects_and_only_narrows():
    def tagged(tag: str, field: str) -> dict:
        return {
            "type": "object",
            "properties": {"t": {"const": tag}, field: {"type": "number"}},
            "required": ["t", field],
        }

    schema = {
        "type": "object",
        "properties": {
            "kind": {"enum": ["a", "b"]},
            "note": {"type": ["string", "null"]},  # optional, and admits null: kept
            "tags": {"type": "array", "items": {"type": "string"}},
            "shape": {"oneOf": [tagged("circle", "r"), tagged("square", "s")]},
            "ref": {"$ref": "#/$defs/node"},
        },
        "required": ["kind", "tags", "shape", "ref"],
        "$defs": {"node": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
    }
    before = json.dumps(schema)
    out = caps.strict_output_schema(schema)
    assert json.dumps(schema) == before  # the input is not modified
    assert (
        out["required"] == ["kind", "note", "tags", "shape", "ref"] and out["additionalProperties"] is False
    )
    assert out["properties"]["kind"] == {"enum": ["a", "b"]}
    assert out["properties"]["note"] == {"type": ["string", "null"]}
    shape = out["properties"]["shape"]  # disjoint oneOf -> anyOf
    assert "oneOf" not in shape and [b["properties"]["t"]["const"] for b in shape["anyOf"]] == [
        "circle",
        "square",
    ]
    assert shape["anyOf"][0]["additionalProperties"] is False
    assert out["properties"]["ref"] == {"$ref": "#/$defs/node"}
    assert out["$defs"]["node"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "string"}, "at the root"),
        ({"type": "object", "properties": {}, "additionalProperties": True}, "open object"),
        (_required({"meta": {"type": "object"}}), "open object"),  # free-form: any object
        ({"type": "object", "properties": {"n": {"type": "integer"}}}, "'n' is optional"),
        (_required({"v": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}}), "overlap"),
        (_required({"v": {"oneOf": [{"type": "number"}, {"type": "integer"}]}}), "overlap"),
        (_required({f"p{i}": {"type": "string"} for i in range(5_001)}), "5000 properties"),
        (_required({"e": {"enum": list(range(1_001))}}), "1000 enum values"),
        (_required({"e": {"enum": ["x" * 60_001, "y" * 60_001]}}), "120000 characters"),
    ],
    ids=[
        "root-not-object",
        "open",
        "free-form",
        "optional",
        "overlapping-oneof",
        "number-integer",
        "properties",
        "enum",
        "chars",
    ],
)
def test_strict_projection_refuses_what_it_cannot_keep(schema, words):
    with pytest.raises(MeshError) as info:
        caps.strict_output_schema(schema)
    assert info.value.reason == "UNSUPPORTED_CAPABILITY"
    assert info.value.metadata["field"] == "settings.output_json_schema"
    assert words in info.value.message


def test_strict_projection_limits_object_depth():
    def level() -> dict:
        return {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}

    schema = level()
    node = schema
    for _ in range(9):
        node["properties"]["c"] = child = level()
        node["required"].append("c")
        node = child
    assert caps.strict_output_schema(schema)  # 10 levels of objects
    node["properties"]["c"] = level()
    node["required"].append("c")
    with pytest.raises(MeshError, match="nests at most 10"):
        caps.strict_output_schema(schema)  # 11


def test_closed_schema_for_anthropic():
    schema = {
        "type": "object",
        "properties": {"properties": {"type": "object", "properties": {"x": {"type": "string"}}}},
        "anyOf": [{"type": "object", "properties": {"y": {"type": "integer"}}}],
    }
    out = caps.closed_output_schema(schema)
    assert out["additionalProperties"] is False
    # a property called "properties" is a property, not a keyword
    assert set(out["properties"]) == {"properties"}
    assert out["properties"]["properties"]["additionalProperties"] is False
    assert out["anyOf"][0]["additionalProperties"] is False
    with pytest.raises(MeshError):
        caps.closed_output_schema({"type": "object", "additionalProperties": {"type": "string"}})
    with pytest.raises(MeshError):  # any object at all: closing it would leave only {}
        caps.closed_output_schema({"type": "object", "properties": {"free": {"type": "object"}}})
    assert caps.closed_output_schema({"type": "object", "additionalProperties": False}) == {
        "type": "object",
        "additionalProperties": False,
    }
