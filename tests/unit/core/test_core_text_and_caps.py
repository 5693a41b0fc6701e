"""core.text (lone surrogates), core.truncate.head_tail (byte caps) and bounded errors."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agentrt.core.errors import MAX_MESSAGE_BYTES, MAX_METADATA_VALUE_BYTES, invalid, quote
from agentrt.core.text import lone_surrogate_path, scrub, scrub_json, scrubbed
from agentrt.core.truncate import byte_len, head_tail, utf8_prefix, utf8_suffix


def mark(n: int) -> str:
    return f"\n[... {n} bytes of output dropped ...]\n"


# -- lone surrogates ---------------------------------------------------------------------


def test_scrub_replaces_lone_surrogates_and_joins_pairs():
    assert scrub("a\ud99cb") == "a\ufffdb"
    assert scrub("\ud83d\ude00") == "😀"  # a pair held as two code points is the character
    clean = "héllo"
    assert scrub(clean) is clean


def test_scrub_json_edits_only_lone_escapes():
    assert scrub_json(r'{"a": "\ud99c"}') == r'{"a": "\ufffd"}'
    assert scrub_json(r'{"a": "\uDC00x\uD800"}') == r'{"a": "\ufffdx\ufffd"}'
    for kept in (r'{"a": "\ud83d\ude00"}', r'{"a": "\\ud99c"}', r'{ "a" :1 }', "not json"):
        assert scrub_json(kept) is kept
    assert scrub_json(r'["\ud800\ud800\udc00"]') == r'["\ufffd\ud800\udc00"]'


@given(st.lists(st.one_of(st.sampled_from(["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\\\", "a", "é"]))))
def test_scrub_json_output_always_decodes_to_valid_unicode(parts):
    doc = '{"k": "' + "".join(parts) + '"}'  # a JSON string holding these escapes verbatim
    value = json.loads(scrub_json(doc))
    assert lone_surrogate_path(value) is None
    value["k"].encode("utf-8")


def test_scrubbed_and_the_path_of_a_lone_surrogate():
    value = {"a": [1, "x", {"b\udc00": "ok"}], "c": "fine"}
    assert lone_surrogate_path(value) == "/a/2/b\ufffd"
    assert scrubbed(value) == {"a": [1, "x", {"b\ufffd": "ok"}], "c": "fine"}
    clean = {"a": ["x"]}
    assert scrubbed(clean) is clean and lone_surrogate_path(clean) is None


# -- byte caps ---------------------------------------------------------------------------


def test_utf8_cuts_land_on_character_boundaries():
    data = "a中b".encode()
    assert utf8_prefix(data, 2) == b"a"  # "中" is 3 bytes: left out whole
    assert utf8_prefix(data, 4) == "a中".encode()
    assert utf8_suffix(data, 3) == b"b"
    assert utf8_suffix(data, 4) == "中b".encode()


@given(
    st.text(alphabet=st.sampled_from("a中é😀\n"), max_size=200),
    st.integers(min_value=0, max_value=300),
    st.booleans(),
)
def test_head_tail_holds_the_cap_in_bytes_marker_included(text, cap, garbage):
    data = text.encode() + (b"\xff\x80" + text.encode() if garbage else b"")
    head_cap, tail_cap = cap - cap // 2, cap // 2
    if len(data) <= cap:
        head, tail = data[:head_cap], data[head_cap:]
    else:
        head, tail = data[:head_cap], (data[-tail_cap:] if tail_cap else b"")
    out, truncated = head_tail(head, tail, len(data), cap, mark)
    real = data.decode("utf-8", "replace")
    assert byte_len(out) <= cap
    if not truncated:
        assert out == real
        return
    if "bytes of output dropped" not in out:
        assert real.startswith(out)  # the cap cannot hold a marker: the head alone
        return
    shown_head, rest = out.split("\n[... ", 1)
    dropped, shown_tail = rest.split(" bytes of output dropped ...]\n", 1)
    assert real.startswith(shown_head) and real.endswith(shown_tail)
    if not garbage:
        assert "\ufffd" not in out
        assert int(dropped) == len(data) - byte_len(shown_head) - byte_len(shown_tail)


# -- bounded errors ----------------------------------------------------------------------


def test_errors_are_bounded_where_they_are_built():
    err = invalid("INVALID_ID", "malformed id " + "é" * 5000, field="x" * 5000)
    assert byte_len(err.message) <= MAX_MESSAGE_BYTES and err.message.endswith("…")
    assert byte_len(err.metadata["field"]) <= MAX_METADATA_VALUE_BYTES
    echoed = quote("é" * 100)
    assert echoed.startswith("'é") and echoed.endswith("…'") and byte_len(echoed) <= 64 + 2
    assert quote("short") == "'short'"
