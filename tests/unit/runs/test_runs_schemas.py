"""JSON Schemas through jsonschema (runs/spec/schemas.py): meta-schema checks and compiled validators."""

from __future__ import annotations

import json
import socket

import pytest

from agentrt.core.errors import MeshError
from agentrt.runs.spec import schemas

NESTED = {
    "type": "object",
    "properties": {
        "config": {
            "type": "object",
            "properties": {"host": {"type": "string"}, "port": {"type": "integer", "maximum": 65535}},
            "required": ["port"],
        },
        "mode": {"enum": ["fast", "safe"]},
    },
    "required": ["config"],
}


def test_the_whole_schema_is_enforced_with_json_pointers():
    check = schemas.validator(json.dumps(NESTED))
    assert check is not None
    # a root-only check would accept this: config.port is required one level down
    assert [(p.pointer, p.message) for p in check({"config": {"host": "x"}})] == [
        ("/config", "'port' is a required property")
    ]
    problems = check({"config": {"host": 1, "port": 70000}, "mode": "slow"})
    assert [p.pointer for p in problems] == ["/config/host", "/config/port", "/mode"]
    assert check({"config": {"port": 22}, "mode": "safe"}) == ()


def test_a_validator_is_compiled_once_per_schema_text():
    text = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    assert schemas.validator(text) is schemas.validator(text)


def test_pointers_escape_slash_and_tilde():
    check = schemas.validator(json.dumps({"type": "object", "properties": {"a/b~c": {"type": "integer"}}}))
    assert check is not None
    assert check({"a/b~c": "x"})[0].pointer == "/a~1b~0c"


def test_a_schema_that_cannot_be_compiled_skips_validation():
    assert schemas.validator(json.dumps({"type": "objekt"})) is None  # not a schema
    assert schemas.validator("") is None and schemas.validator("[1]") is None
    dangling_ref = {"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}
    dangling = schemas.validator(json.dumps(dangling_ref))
    assert dangling is not None and dangling({"a": 1}) == ()


def test_no_reference_is_ever_fetched_from_the_network(monkeypatch):
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    check = schemas.validator(json.dumps({"$ref": "https://example.com/remote.json"}))
    assert check is not None and check({"anything": 1}) == ()
    assert attempts == []
    # the bundled meta-schemas still resolve
    meta = schemas.validator(json.dumps({"$ref": "https://json-schema.org/draft/2020-12/schema"}))
    assert meta is not None and meta({"type": 5})


def test_check_schema_names_the_error_and_where():
    with pytest.raises(MeshError) as info:
        schemas.check_schema(json.dumps({"properties": {"n": {"minimum": "x"}}}), "agent.output_json_schema")
    err = info.value
    assert (err.reason, err.metadata["field"]) == ("INVALID_SCHEMA", "agent.output_json_schema")
    assert err.metadata["schema_pointer"] == "/properties/n/minimum"
    with pytest.raises(MeshError) as info:
        schemas.check_schema("[1,", "f")
    assert info.value.reason == "INVALID_JSON"
    for text in ('{"type": "number", "maximum": Infinity}', '{"const": NaN}'):  # decision 0043
        with pytest.raises(MeshError) as info:
            schemas.check_schema(text, "agent.output_json_schema")
        assert info.value.reason == "INVALID_JSON" and "non-finite" in info.value.message
        assert schemas.decoded(text) is None and schemas.validator(text) is None
    # $schema selects the meta-schema: draft-04's exclusiveMaximum is a boolean
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 3, "exclusiveMaximum": True}
    assert schemas.check_schema(json.dumps(draft4), "f")
