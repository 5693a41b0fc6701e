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
