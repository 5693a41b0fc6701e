r"""Text that is valid Unicode: lone UTF-16 surrogates found and normalized (issue 10 "Bad bytes").

A model may write a lone surrogate into JSON (`"\ud99c"`): valid JSON text, valid UTF-8, yet
it decodes to a code point no UTF-8 encoder accepts. Python then holds a `str` that cannot
be put in a protobuf string, written to a file or sent in an HTTP body. Two shapes exist:
- *raw*: a `str` holding a code point in U+D800..U+DFFF (what `json.loads` returns for
  such an escape);
- *escaped*: JSON text holding `\uD8xx`..`\uDFxx` escapes that do not form a pair.

Invariants:
- `scrub` and `scrub_json` change nothing in text that has neither shape (the same object
  is returned), and replace each lone surrogate by U+FFFD (raw) or `\ufffd` (escaped); a
  high + low pair of raw code points is joined into the character it encodes, an escaped
  pair is kept as written.
- `scrub_json` edits only the offending escapes: every other byte of the JSON text stays as
  it was (tool-call arguments travel as the model's exact string, DESIGN "Contracts").
- `scrubbed` rebuilds only the containers that held a lone surrogate.
Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

#: U+FFFD REPLACEMENT CHARACTER, what a lone surrogate becomes.
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.S)
_HIGH = range(0xD800, 0xDC00)
_LOW = range(0xDC00, 0xE000)


def has_lone_surrogate(text: str) -> bool:
    """Return True when text holds a raw code point in U+D800..U+DFFF."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def scrub(text: str) -> str:
    """Return text with every raw lone surrogate replaced by U+FFFD (text itself when none)."""
    if not has_lone_surrogate(text):
        return text
    # UTF-16 with surrogatepass joins a high+low pair and leaves a lone one undecodable.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def scrub_json(text: str) -> str:
    r"""Return JSON text whose escapes of lone surrogates became `\ufffd` (text itself when none).

    Raw lone surrogates are replaced too (`scrub`). Escaped backslashes are skipped, so
    `\\ud99c` (a backslash, then the letters) is left alone.
    """
    text = scrub(text)
    if "\\u" not in text and "\\U" not in text:
        return text
    out: list[str] = []
    last = 0
    pending: re.Match[str] | None = None  # a high surrogate escape awaiting its low half
    for m in _ESCAPE.finditer(text):
        code = int(m.group(1), 16) if m.group(1) else -1
        if pending is not None:
            if code in _LOW and m.start() == pending.end():
                pending = None
                continue
            out.append(text[last : pending.start()] + "\\ufffd")
            last = pending.end()
            pending = None
        if code in _HIGH:
            pending = m
        elif code in _LOW:
            out.append(text[last : m.start()] + "\\ufffd")
            last = m.end()
    if pending is not None:
        out.append(text[last : pending.start()] + "\\ufffd")
        last = pending.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def scrubbed(value: Any) -> Any:
    """Return a JSON-shaped value (dicts, lists, strings, scalars) with every string scrubbed.

    Keys are scrubbed too. Containers without a lone surrogate come back as the same objects.
    """
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for k, v in value.items():
            k2, v2 = scrubbed(k), scrubbed(v)
            changed = changed or k2 is not k or v2 is not v
            out[k2] = v2
        return out if changed else value
    if isinstance(value, list):
        items = [scrubbed(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def lone_surrogate_path(value: Any, path: str = "") -> str | None:
    """Return the JSON-pointer-like path of the first string holding a lone surrogate, or None.

    The path is "" for the value itself, "/key" or "/0" below it; a key holding one is
    reported as its own path.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                return where
        elif isinstance(item, dict):
            for k, v in reversed(list(item.items())):
                key = f"{where}/{scrub(str(k))}"
                if isinstance(k, str) and has_lone_surrogate(k):
                    return key
                stack.append((v, key))
        elif isinstance(item, list):
            stack.extend((v, f"{where}/{i}") for i, v in reversed(list(enumerate(item))))
    return None
