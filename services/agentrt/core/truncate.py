"""Byte-bounded, character-safe shortening of text (seed 000 Truncate).

Invariants of `truncate(s, n)`:
- the result is at most ``max(n, 0)`` bytes of UTF-8, the cut mark included;
- a character is never split (the cut backs off to a character boundary);
- the cut is marked with "…" (3 bytes) when n can hold the mark, and unmarked otherwise;
- a string already within n bytes is returned unchanged.
"""

from __future__ import annotations

MARK = "…"
_MARK_BYTES = len(MARK.encode("utf-8"))


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def truncate(s: str, n: int) -> str:
    """Shorten s to at most n bytes of UTF-8, "…" included, without splitting a character.

    Args:
        s: the text.
        n: the byte budget; a negative n is treated as 0.

    Returns:
        s itself when its UTF-8 form is within n bytes; otherwise the longest prefix that,
        with the mark appended, fits in n bytes (the prefix alone when n < 3 bytes).
    """
    n = max(n, 0)
    raw = s.encode("utf-8", "surrogatepass")
    if len(raw) <= n:
        return s
    mark = MARK if n >= _MARK_BYTES else ""
    cut = n - len(mark.encode("utf-8"))
    while cut > 0 and _is_continuation(raw[cut]):
        cut -= 1
    return raw[:cut].decode("utf-8", "surrogatepass") + mark


def byte_len(s: str) -> int:
    """Return the length of s in UTF-8 bytes."""
    return len(s.encode("utf-8", "surrogatepass"))
