"""The status a server span and the RPC metrics give a call cut short (mesh/telemetry/rpc.py)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentrt.mesh.telemetry.rpc import DEADLINE_SLACK_S, _failed_code


class _Context:
    """What `_failed_code` reads of a grpc.aio.ServicerContext: the deadline left, the code set."""

    def __init__(self, remaining: float | None, code: object = None) -> None:
        self._remaining, self._code = remaining, code

    def time_remaining(self) -> float | None:
        return self._remaining

    def code(self) -> object:
        return self._code


@pytest.mark.parametrize(
    ("remaining", "code"),
    [
        (None, grpc.StatusCode.CANCELLED),  # no deadline: the caller went away
        (5.0, grpc.StatusCode.CANCELLED),  # the caller cancelled long before its deadline
        (-0.01, grpc.StatusCode.DEADLINE_EXCEEDED),  # the server's own timer fired
        (0.0, grpc.StatusCode.DEADLINE_EXCEEDED),
        # The caller's timer fired first (it started the deadline a transit time earlier) and
        # its cancel arrived before the server's timer: still the deadline's doing.
        (0.004, grpc.StatusCode.DEADLINE_EXCEEDED),
        (DEADLINE_SLACK_S, grpc.StatusCode.DEADLINE_EXCEEDED),
        (DEADLINE_SLACK_S + 0.05, grpc.StatusCode.CANCELLED),
    ],
)
def test_a_cancel_is_the_deadlines_when_the_deadline_was_all_but_spent(remaining, code):
    assert _failed_code(asyncio.CancelledError(), _Context(remaining)) == code  # type: ignore[arg-type]


def test_a_failure_other_than_a_cancel_keeps_the_code_the_handler_set():
    ctx = _Context(0.0, grpc.StatusCode.NOT_FOUND)
    assert _failed_code(RuntimeError("x"), ctx) == grpc.StatusCode.NOT_FOUND  # type: ignore[arg-type]
    assert _failed_code(RuntimeError("x"), _Context(0.0)) == grpc.StatusCode.UNKNOWN  # type: ignore[arg-type]


def test_a_stream_closed_at_its_yield_was_cancelled_not_unknown():
    """grpc may close the response generator of a stream its caller left (GeneratorExit at the
    yield) instead of cancelling its task: seen under load as server spans with UNKNOWN (2)."""
    assert _failed_code(GeneratorExit(), _Context(None)) == grpc.StatusCode.CANCELLED  # type: ignore[arg-type]
    assert _failed_code(GeneratorExit(), _Context(0.0)) == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[arg-type]
