"""core.jsontext: strict JSON, refusing what Python's json reads beyond the standard."""

from __future__ import annotations

import json
import math

import pytest

from agentrt.core import jsontext


@pytest.mark.parametrize(
    "text", ["NaN", '{"n": NaN}', "[Infinity]", '{"a": [-Infinity]}', "1e999", '{"x": -1e400}']
)
def test_non_finite_numbers_are_not_json(text):
    json.loads(text)  # what the standard library alone accepts
    with pytest.raises(ValueError, match="non-finite numbers are not JSON"):
        jsontext.loads(text)


@pytest.mark.parametrize(
    "text", ['{"n": 1.5e300, "s": "NaN", "i": 10000000000000000000000}', "[-0.0, 5e-324]", "null"]
)
def test_everything_else_reads_as_json_loads_does(text):
    value = jsontext.loads(text)
    assert value == json.loads(text)
    assert all(math.isfinite(v) for v in (value or []) if isinstance(v, float))


def test_bad_json_and_deep_nesting_raise_as_json_loads_does():
    with pytest.raises(json.JSONDecodeError):
        jsontext.loads('{"a": ')
    with pytest.raises(RecursionError):
        jsontext.loads("[" * 100_000 + "]" * 100_000)


def test_lenient_only_names_the_texts_only_a_lenient_reader_takes():
    from agentrt.core.jsontext import lenient_only

    for text in ('{"n": NaN}', '{"n": -Infinity}', "[1e999]", '{"a": [Infinity]}'):
        assert lenient_only(text), text
    for text in ('{"q": "To Infinity and NaN"}', '{"n": 1e10}', "[1e-999]", "{bad", "", '{"name": 1}'):
        assert not lenient_only(text), text


def test_a_recorded_call_with_nan_arguments_renders_out_of_band():
    """A session recorded before decision 0043 replays its NaN call as {"invalid_json": ...}."""
    import json

    from agentrt.core.decide import Call
    from agentrt.core.render import args_json

    nan = Call(0, "c1", "exec_command", '{"cmd": "echo hi", "n": NaN}', "", False, "")
    assert json.loads(args_json(nan)) == {"invalid_json": '{"cmd": "echo hi", "n": NaN}'}
    fine = Call(0, "c2", "exec_command", '{"cmd": "echo Infinity"}', "", False, "")
    assert args_json(fine) == '{"cmd": "echo Infinity"}'
