"""Strict JSON text decoding: what RFC 8259 calls JSON, and nothing more.

Python's `json.loads` also reads the tokens `NaN`, `Infinity` and `-Infinity`, and reads a
number too large for a float (`1e999`) as infinity; no JSON encoder the runtime talks to will
write either back (the provider SDKs and httpx encode with `allow_nan=False`). A text holding
one is refused here as not JSON, like any other bad text.
Every place that decides whether a text *is* JSON (the gateway's validation and its reading of
tool-call arguments, the tool service's argument decoding) decodes through `loads`, so they
agree.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any


class NonFiniteNumber(ValueError):
    """A JSON text held NaN, Infinity or -Infinity (a ValueError, as json's own errors are)."""


def _refuse(token: str) -> Any:
    raise NonFiniteNumber(f"{token} is not a JSON number (non-finite numbers are not JSON)")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise NonFiniteNumber(f"{literal[:40]} is out of a float's range (non-finite numbers are not JSON)")
    return value


#: One decoder for every call: `json.loads` with hooks would build a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_refuse, parse_float=_finite)


def loads(text: str) -> Any:
    """Decode one JSON value, refusing non-finite numbers (the tokens, and overflowing literals).

    Args:
        text: the JSON text.

    Returns:
        The decoded value (dict, list, str, int, float, bool or None; every float finite).

    Raises:
        ValueError: not JSON (`json.JSONDecodeError`), or a NaN / Infinity / -Infinity token
            or a number literal beyond a float's range (`NonFiniteNumber`).
        RecursionError: nesting deeper than the interpreter's recursion limit allows.
    """
    return _DECODER.decode(text)


#: What a text holding a non-finite number must contain: a token, or an exponent of 3+ digits.
_SUSPECT = re.compile(r"NaN|Infinity|[eE]\+?\d{3}")


def lenient_only(text: str) -> bool:
    """True when text is JSON only to Python's lenient reader (a NaN, an Infinity, an overflow).

    Cheap for the common text (one regex search); decodes only a text that could hold one.
    A text that is not JSON at all is not "lenient only" (False).
    """
    if not _SUSPECT.search(text):
        return False
    try:
        loads(text)
    except NonFiniteNumber:
        return True
    except (ValueError, RecursionError):
        return False
    return False
