"""Tool-call arguments against their schema (core/tool_args.py, runs/spec/schemas.py): errors, defaults."""

from __future__ import annotations

import json

from agentrt.core.tool_args import (
    MAX_PROBLEMS,
    SchemaProblem,
    apply_defaults,
    check_arguments,
    json_pointer,
    problems_text,
)
from agentrt.runs.spec.schemas import validator

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "encoding": {"type": "string", "default": "utf-8"},
        "limits": {
            "type": "object",
            "properties": {"lines": {"type": "integer", "default": 100}, "bytes": {"type": "integer"}},
        },
        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"default": "v"}}}},
        "mode": {"anyOf": [{"properties": {"x": {"default": 1}}}]},
    },
    "required": ["path"],
}
CHECK = validator(json.dumps(SCHEMA))


def test_pointers_follow_rfc_6901():
    assert json_pointer([]) == "" and json_pointer(["a", 0, "b/c", "~d"]) == "/a/0/b~1c/~0d"


def test_exact_text_travels_when_nothing_is_added():
    text = '{"path":  "a.txt", "encoding": "latin-1", "limits": {"lines": 5}}'
    got = check_arguments(text, SCHEMA, CHECK)
    assert (got.ok, got.arguments, got.defaults_applied) == (True, text, False)


def test_defaults_are_applied_nested_and_in_order_after_validation():
    got = check_arguments('{"limits": {"bytes": 9}, "path": "a", "tags": [{}]}', SCHEMA, CHECK)
    assert got.ok and got.defaults_applied
    assert got.arguments == (
        '{"limits": {"bytes": 9, "lines": 100}, "path": "a", "tags": [{"k": "v"}], "encoding": "utf-8"}'
    )
    # deterministic: the same call always yields the same string
    assert check_arguments('{"limits": {"bytes": 9}, "path": "a", "tags": [{}]}', SCHEMA, CHECK) == got
    # composition is not followed: which branch a value takes is ambiguous
    assert (
        "x" not in json.loads(check_arguments('{"path": "a", "mode": {}}', SCHEMA, CHECK).arguments)["mode"]
    )


def test_the_value_as_sent_is_validated_whole_before_defaults():
    got = check_arguments('{"limits": {"lines": "many"}}', SCHEMA, CHECK)
    assert not got.ok
    assert [(p.pointer, p.message) for p in got.problems] == [
        ("", "'path' is a required property"),
        ("/limits/lines", "'many' is not of type 'integer'"),
    ]
    assert got.arguments == '{"limits": {"lines": "many"}}'


def test_empty_arguments_read_as_an_object_and_other_shapes_are_refused():
    assert (
        check_arguments("", {"type": "object", "properties": {"n": {"default": 1}}}, None).arguments
        == '{"n": 1}'
    )
    assert check_arguments("", None, None).arguments == ""
    assert (
        check_arguments("[1, 2]", SCHEMA, CHECK).problems[0].message == "the arguments must be a JSON object"
    )
    assert "not valid JSON" in check_arguments("{", SCHEMA, CHECK).problems[0].message


def test_a_schema_that_cannot_be_compiled_skips_validation_but_not_defaults():
    schema = {"type": "objekt", "properties": {"n": {"default": 2}}}
    assert validator(json.dumps(schema)) is None
    got = check_arguments("{}", schema, None)
    assert got.ok and got.arguments == '{"n": 2}'


def test_apply_defaults_never_changes_its_input():
    value = {"limits": {}}
    out = apply_defaults(SCHEMA, value)
    assert value == {"limits": {}} and out["limits"] == {"lines": 100}
    out["limits"]["lines"] = 1
    assert apply_defaults(SCHEMA, {"limits": {}})["limits"]["lines"] == 100  # defaults are copied


def test_the_refusal_names_pointers_and_counts_the_rest():
    problems = [SchemaProblem(f"/items/{i}", "0 is not of type 'string'") for i in range(MAX_PROBLEMS + 2)]
    text = problems_text("write_file", problems)
    assert "this write_file call do not match" in text and "did not run" in text
    assert "- at /items/0: 0 is not of type 'string'" in text and "- and 2 more problem(s)" in text
    assert "/items/5" not in text
    assert "at the top level" in problems_text("t", [SchemaProblem("", "'path' is a required property")])
