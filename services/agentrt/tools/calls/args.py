r"""Lenient decoding of a call's argument string (004 §2.7l, §2.7h).

Every failure raises `ArgError` whose text tells the model what to resend; the tools turn
it into an is_error result, never a gRPC error, so the model's spelling slip costs one call,
not the run. Optional string fields accept the zero-value sentinels null, 0 and false as
"" (a non-strict backend fills an unused field with them); any other non-string refuses.
Unknown keys are ignored (additionalProperties is not enforced locally, §2.7h). A string
holding an escape of a lone UTF-16 surrogate (`"\ud99c"`: valid JSON, but no character) is
refused the same way, naming where it is, before any tool uses it: no file, command line or
journal record can hold one. JSON is read strictly (`core.jsontext`): NaN, Infinity,
-Infinity or a number beyond a float's range are not JSON, and arguments nested deeper than
the interpreter can read are refused the same way, never an internal error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentrt.core import jsontext
from agentrt.core.text import lone_surrogate_path


class ArgError(Exception):
    """Arguments the tool cannot use; `str()` is the model-facing explanation."""


@dataclass(frozen=True)
class CallInput:
    """A tool call as the tool service receives it.

    Attributes:
        call_id: the runtime's call id.
        name: the tool name.
        arguments: the exact argument string ("" when absent or not JSON).
        invalid_arguments: text that was not JSON (base64 when invalid_arguments_base64).
        invalid_arguments_base64: True when invalid_arguments is base64 of non-UTF-8 bytes.
    """

    call_id: str
    name: str
    arguments: str = ""
    invalid_arguments: str = ""
    invalid_arguments_base64: bool = False


_RESEND = "Resend the call with the arguments as one JSON object."


def decode_object(call: CallInput) -> dict[str, Any]:
    """Return the call's arguments as a dict ({} when there were none).

    Raises:
        ArgError: the arguments were not JSON (including a non-finite number, or nesting
            deeper than Python's recursion limit lets json read), not a JSON object, or hold
            a string with a lone surrogate.
    """
    if call.invalid_arguments:
        what = "bytes that are not UTF-8" if call.invalid_arguments_base64 else "text that is not valid JSON"
        raise ArgError(f"The arguments of {call.name} were {what}. {_RESEND}")
    text = call.arguments.strip()
    if not text or text == "null":
        return {}
    try:
        value = jsontext.loads(text)
    except ValueError as exc:  # JSONDecodeError, or a non-finite number
        raise ArgError(f"The arguments of {call.name} are not valid JSON ({exc}). {_RESEND}") from exc
    except RecursionError as exc:
        raise ArgError(
            f"The arguments of {call.name} nest too deeply to read. Resend the call with the "
            "arguments as one flat JSON object."
        ) from exc
    if not isinstance(value, dict):
        raise ArgError(
            f"The arguments of {call.name} must be a JSON object, not {type(value).__name__}. {_RESEND}"
        )
    where = lone_surrogate_path(value)
    if where is not None:
        raise ArgError(
            f"The arguments of {call.name} hold a lone UTF-16 surrogate escape (such as \\ud99c) at "
            f"{where!r}: it encodes no character. Resend the call with valid text there."
        )
    return value


def required_str(args: dict[str, Any], name: str) -> str:
    """Return a required, non-empty string argument.

    Raises:
        ArgError: missing, empty, or not a string.
    """
    value = args.get(name)
    if value is None:
        raise ArgError(f'"{name}" is required: a non-empty string.')
    if not isinstance(value, str):
        raise ArgError(f'"{name}" must be a string, not {json.dumps(value)}.')
    if not value:
        raise ArgError(f'"{name}" must not be empty.')
    return value


def string(args: dict[str, Any], name: str) -> str:
    """Return a required string argument that may be empty (file content).

    Raises:
        ArgError: missing or not a string.
    """
    value = args.get(name)
    if not isinstance(value, str):
        raise ArgError(f'"{name}" is required and must be a string.')
    return value


def optional_str(args: dict[str, Any], name: str) -> str:
    """Return an optional string argument; absent, null, 0 and false decode to "".

    Raises:
        ArgError: any other non-string value (true, 42, 3.14, objects).
    """
    value = args.get(name)
    if value is None or value is False or (type(value) is int and value == 0):
        return ""
    if isinstance(value, str):
        return value
    raise ArgError(f'"{name}" must be a string (or null), not {json.dumps(value)}.')


MAX_SESSION_ID_CHARS = 128


def session_id(args: dict[str, Any]) -> str:
    """Return exec_command's optional shell name (004 §2.7k, §2.7l); "" means no session.

    Decoded like `optional_str` (null, 0 and false are "no session"; a session genuinely
    named "0" is the string "0"), and at most MAX_SESSION_ID_CHARS characters.

    Raises:
        ArgError: a non-string other than the sentinels, or a name that is too long.
    """
    value = optional_str(args, "session_id")
    if len(value) > MAX_SESSION_ID_CHARS:
        raise ArgError(f'"session_id" must be at most {MAX_SESSION_ID_CHARS} characters.')
    return value


def optional_int(args: dict[str, Any], name: str, minimum: int) -> int | None:
    """Return an optional integer argument >= minimum; absent or null gives None.

    Raises:
        ArgError: not an integer, or below minimum.
    """
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ArgError(f'"{name}" must be an integer, not {json.dumps(value)}.')
    if value < minimum:
        raise ArgError(f'"{name}" must be at least {minimum}, not {json.dumps(value)}.')
    return int(value)


def optional_bool(args: dict[str, Any], name: str) -> bool:
    """Return an optional boolean argument; absent or null is False.

    Raises:
        ArgError: not a boolean.
    """
    value = args.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ArgError(f'"{name}" must be true or false, not {json.dumps(value)}.')
    return value
