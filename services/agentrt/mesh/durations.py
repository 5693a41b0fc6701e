"""The one check of a `google.protobuf.Duration` a request carries (issue 10 "Bad input").

A Duration is well formed (google/protobuf/duration.proto) when `seconds` is within
±315,576,000,000, `nanos` within ±999,999,999, and the two do not have opposite signs.
The protobuf runtime accepts any pair on the wire, so every service reads a request's
Duration through `seconds_of`, which refuses a malformed one, a negative one and one
beyond the field's own maximum, naming the field: INVALID_ARGUMENT/INVALID_VALUE with
metadata `field`. Nothing else in a service reads `.seconds` / `.nanos` of a request.
"""

from __future__ import annotations

from google.protobuf import duration_pb2

from agentrt.core.errors import Reason, invalid

#: The range of Duration.seconds the proto defines (about 10,000 years).
MAX_DURATION_SECONDS = 315_576_000_000
#: The longest per-call tool timeout (ExecuteToolRequest.timeout, an agent's tool timeout),
#: seconds: a day. The run loop refuses a longer one at RegisterAgent/StartRun, so a run
#: never sends the tool service a timeout it refuses.
MAX_TOOL_TIMEOUT_SECONDS = 86_400.0
_MAX_NANOS = 999_999_999


def check_duration(duration: duration_pb2.Duration, field: str) -> None:
    """Refuse a Duration the proto's own rules reject (see the module docstring).

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE naming `field`.
    """
    seconds, nanos = duration.seconds, duration.nanos
    problem = ""
    if not -MAX_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        problem = f"seconds must be within ±{MAX_DURATION_SECONDS}, not {seconds}"
    elif not -_MAX_NANOS <= nanos <= _MAX_NANOS:
        problem = f"nanos must be within ±{_MAX_NANOS}, not {nanos}"
    elif (seconds > 0 > nanos) or (seconds < 0 < nanos):
        problem = f"seconds ({seconds}) and nanos ({nanos}) must not have opposite signs"
    if problem:
        raise invalid(Reason.INVALID_VALUE, f"{field} is not a valid Duration: {problem}", field=field)


def seconds_of(duration: duration_pb2.Duration, field: str, *, max_seconds: float | None = None) -> float:
    """Return a request's Duration in seconds, refusing a malformed, negative or too long one.

    Args:
        duration: the field's value (an unset field reads as 0 s; callers test HasField).
        field: its name in the request, for the error's `field` metadata.
        max_seconds: the longest accepted, seconds; None for the proto's own bound.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE naming `field`.
    """
    check_duration(duration, field)
    value = duration.seconds + duration.nanos / 1e9
    if value < 0:
        raise invalid(Reason.INVALID_VALUE, f"{field} must not be negative", field=field)
    if max_seconds is not None and value > max_seconds:
        raise invalid(
            Reason.INVALID_VALUE, f"{field} must be at most {max_seconds:g} s, not {value:g} s", field=field
        )
    return value
