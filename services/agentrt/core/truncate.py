"""Byte-bounded, character-safe shortening of text (seed 000 Truncate): the one place for byte caps.

Every limit here is in bytes of UTF-8, and every cut lands on a character boundary.

Invariants of `truncate(s, n)`:
- the result is at most ``max(n, 0)`` bytes of UTF-8, the cut mark included;
- a character is never split (the cut backs off to a character boundary);
- the cut is marked with "…" (3 bytes) when n can hold the mark, and unmarked otherwise;
- a string already within n bytes is returned unchanged.

Invariants of `head_tail(...)`, the cap of tool output that keeps its start and its end:
- the text returned is at most `cap_bytes` bytes of UTF-8, the marker included;
- the head is a prefix and the tail a suffix of the real output's text, each cut on a
  character boundary: no U+FFFD is invented by a cut (bytes that were not UTF-8 in the
  output itself still read as U+FFFD, and are counted as the 3 bytes they then take);
- the marker names how many bytes of the output are not shown; when the cap cannot hold
  the marker, the head alone is returned, cut to the cap (Truncate's unmarked cut).
"""

from __future__ import annotations

from collections.abc import Callable

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


def text_prefix(s: str, n: int) -> str:
    """Return the longest prefix of s within n bytes of UTF-8 (no mark), on a character boundary."""
    n = max(n, 0)
    raw = s.encode("utf-8", "surrogatepass")
    if len(raw) <= n:
        return s
    cut = n
    while cut > 0 and _is_continuation(raw[cut]):
        cut -= 1
    return raw[:cut].decode("utf-8", "surrogatepass")


def utf8_prefix(data: bytes, n: int) -> bytes:
    """Return the longest prefix of data within n bytes that does not end inside a character.

    data's own end counts as a cut (it may be the head of a longer output): a multi-byte
    sequence the end leaves unfinished is left out whole.
    """
    n = max(0, min(n, len(data)))
    for back in range(min(4, n)):
        i = n - 1 - back
        b = data[i]
        if b < 0x80:
            return data[:n]
        if b >= 0xC0:  # the lead byte of the sequence the cut lands in
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return data[:n] if back + 1 >= need else data[:i]
    return data[:n]


def utf8_suffix(data: bytes, n: int) -> bytes:
    """Return the longest suffix of data within n bytes that does not start inside a character.

    The window's start counts as a cut (data may be the tail of a longer output): up to 3
    leading continuation bytes, the rest of a character begun before it, are left out.
    """
    n = max(0, min(n, len(data)))
    start = len(data) - n
    skip = start
    while skip < len(data) and skip - start < 3 and _is_continuation(data[skip]):
        skip += 1
    return data[skip:]


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _fit_head(data: bytes, budget: int) -> tuple[str, int]:
    """(text, bytes of data shown): the longest character-safe prefix whose text fits budget."""
    cut = min(len(data), max(budget, 0))
    while True:
        part = utf8_prefix(data, cut)
        text = _decoded(part)
        over = byte_len(text) - budget
        if over <= 0:
            return text, len(part)
        # Each byte that was not UTF-8 reads as U+FFFD, 3 bytes: shrink by what overflowed.
        cut = len(part) - max(1, over // 2)


def _fit_tail(data: bytes, budget: int) -> tuple[str, int]:
    """(text, bytes of data shown): the longest character-safe suffix whose text fits budget."""
    take = min(len(data), max(budget, 0))
    while True:
        part = utf8_suffix(data, take)
        text = _decoded(part)
        over = byte_len(text) - budget
        if over <= 0:
            return text, len(part)
        take = len(part) - max(1, over // 2)


def head_tail(
    head: bytes, tail: bytes, total_bytes: int, cap_bytes: int, mark: Callable[[int], str]
) -> tuple[str, bool]:
    """Return (text, truncated): output bounded to cap_bytes with its head and tail kept.

    Args:
        head: the first bytes of the output (a prefix of it).
        tail: the last bytes of the output (a suffix of it); when len(head) + len(tail) is
            total_bytes they are the whole output, head then tail.
        total_bytes: how many bytes the output had, in all.
        cap_bytes: the most bytes of UTF-8 the text may take, the marker included.
        mark: the marker standing where the middle was, given the bytes not shown.

    Returns:
        The text and whether anything of the output is left out of it.
    """
    cap_bytes = max(cap_bytes, 0)
    whole = len(head) + len(tail) >= total_bytes
    if whole:
        data = head + tail
        text = _decoded(data)
        if byte_len(text) <= cap_bytes:
            return text, False
        head = tail = data
    mark_room = byte_len(mark(total_bytes))  # the longest count the marker can name
    budget = cap_bytes - mark_room
    if budget < 0:
        text, _ = _fit_head(head, cap_bytes)
        return text, True
    head_budget = budget - budget // 2
    head_text, head_used = _fit_head(head, head_budget)
    tail_text, tail_used = _fit_tail(tail, budget - byte_len(head_text))
    if whole:
        tail_used = min(tail_used, len(tail) - head_used)  # never show a byte twice
    dropped = total_bytes - head_used - tail_used
    return head_text + mark(dropped) + tail_text, True
