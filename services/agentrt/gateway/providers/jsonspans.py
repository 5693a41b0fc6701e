"""Exact source text of values inside a JSON document.

Anthropic sends a tool call's arguments as a JSON object (`input`) inside the response
body, not as a string. To keep "the exact string the model produced" (seed 000), the
adapter cuts each `input` out of the body's own bytes instead of re-serializing the parsed
object. These helpers find where a member's value starts and ends.
"""

from __future__ import annotations

import json
from json.decoder import scanstring  # type: ignore[attr-defined]

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def member_spans(text: str, start: int = 0) -> dict[str, tuple[int, int]]:
    """Return {key: (start, end)} of the members of the object at text[start:].

    Raises:
        ValueError: text is not a JSON object there.
    """
    i = _skip(text, start)
    if i >= len(text) or text[i] != "{":
        raise ValueError("expected a JSON object")
    spans: dict[str, tuple[int, int]] = {}
    i = _skip(text, i + 1)
    if i < len(text) and text[i] == "}":
        return spans
    while True:
        if i >= len(text) or text[i] != '"':
            raise ValueError(f"expected a key at {i}")
        key, i = scanstring(text, i + 1)
        i = _skip(text, i)
        if i >= len(text) or text[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        i = _skip(text, i + 1)
        _, end = _DECODER.raw_decode(text, i)
        spans[key] = (i, end)
        i = _skip(text, end)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        if i < len(text) and text[i] == "}":
            return spans
        raise ValueError(f"expected ',' or '}}' at {i}")


def element_spans(text: str, start: int) -> list[tuple[int, int]]:
    """Return (start, end) of each element of the array at text[start:].

    Raises:
        ValueError: text is not a JSON array there.
    """
    i = _skip(text, start)
    if i >= len(text) or text[i] != "[":
        raise ValueError("expected a JSON array")
    spans: list[tuple[int, int]] = []
    i = _skip(text, i + 1)
    if i < len(text) and text[i] == "]":
        return spans
    while True:
        _, end = _DECODER.raw_decode(text, i)
        spans.append((i, end))
        i = _skip(text, end)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        if i < len(text) and text[i] == "]":
            return spans
        raise ValueError(f"expected ',' or ']' at {i}")


def content_sources(body: str) -> list[tuple[str, str]]:
    """Return, for each element of the body's `content` array, (element text, input text).

    The input text is "" for blocks without an `input` member.

    Raises:
        ValueError: the body is not an object with a `content` array.
    """
    top = member_spans(body)
    if "content" not in top:
        return []
    out: list[tuple[str, str]] = []
    for s, e in element_spans(body, top["content"][0]):
        members = member_spans(body, s)
        span = members.get("input")
        out.append((body[s:e], body[span[0] : span[1]] if span else ""))
    return out
