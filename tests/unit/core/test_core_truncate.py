"""truncate(): byte bound with the mark included, character-safe, unchanged when within n."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentrt.core.truncate import MARK, byte_len, truncate


def test_within_bound_is_unchanged():
    assert truncate("hello", 5) == "hello"
    assert truncate("hello", 50) == "hello"
    assert truncate("", 0) == ""


def test_cut_includes_the_mark():
    out = truncate("abcdefghij", 6)
    assert out == "abc" + MARK
    assert byte_len(out) == 6


def test_never_splits_a_character():
    # "é" is 2 bytes: 7 bytes of budget = 4 for text + 3 for the mark; "aé" + "é" would be 5
    out = truncate("aéééé", 7)
    assert out == "aé" + MARK
    assert byte_len(out) <= 7
    # a 4-byte emoji is dropped whole rather than cut
    assert truncate("ab😀cde", 8) == "ab" + MARK


def test_unmarked_when_the_mark_does_not_fit():
    assert truncate("abcdef", 2) == "ab"
    assert truncate("abcdef", 0) == ""
    assert truncate("éé", 1) == ""  # one byte cannot hold "é"


def test_negative_is_zero():
    assert truncate("abc", -5) == ""
    assert truncate("", -1) == ""


def test_exact_fit_with_mark():
    assert truncate("abcd", 3) == MARK  # cut to nothing, marked


@given(st.text(), st.integers(min_value=-5, max_value=80))
def test_properties(s, n):
    out = truncate(s, n)
    if byte_len(s) <= max(n, 0):
        assert out == s
    else:
        assert byte_len(out) <= max(n, 0)
        body = out[:-1] if out.endswith(MARK) and n >= 3 else out
        assert s.startswith(body)
        out.encode("utf-8")  # always valid UTF-8
