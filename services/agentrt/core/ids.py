"""Identifiers minted by the runtime.

Ids are `<prefix>_<26 chars>`: a millisecond timestamp and randomness in Crockford
base32, so ids sort by creation time and never collide in practice. `valid_id` is what
servers use to reject malformed ids (INVALID_ARGUMENT) before touching storage.
"""

from __future__ import annotations

import os
import re
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
#: \Z, not $: a $ also matches before a final "\n" (re.match would admit "id\n").
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z")


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    """Return a new time-sortable id such as ``run_01jd...`` (prefix + 26 base32 chars)."""
    ms = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_b32(ms, 10)}{_b32(rand, 16)}"


def valid_id(value: str) -> bool:
    """Return True when value is an acceptable caller-chosen id.

    Acceptable: 1..128 chars of letters, digits and ``_ . : -``, starting with a letter or digit.
    """
    return bool(_ID_RE.match(value))
