"""How a run fails: the one place its structured failures are made and peers' errors classified.

A failure is structured (002 "Failures are structured"): a stable kind, a retryable flag, a
user-safe message, the operator's debug text, the `ErrorReason` behind it and the kind's
details (`cpb.FailureInfo`).

- `RunFailed`: raised by any phase; the executor ends the run failed with its failure.
- `ContextOverflow`: the request did not fit the model's context window (004 §2.5g); the
  housekeeping compacts and asks again, or the run fails with `overflow_failure`.
- `failure`: a structured failure; every kind the run loop ends a run with is made here or
  through it (the phases name their kinds: `max_turns`, `timeout`, `refusal`,
  `handoff_failed`, `sandbox_unavailable`, ...).
- `failure_of`: a peer's `MeshError` classified: the kind from its reason, then its status.
- `overflow_failure`, `guardrail_failure`: an overflow the run could not recover from; a
  guardrail result that ends the run (a tripwire, or an error: fail closed).
"""

from __future__ import annotations

import json

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.core.guardrails import Result
from agentrt.v1 import common_pb2 as cpb


class ContextOverflow(Exception):
    """The request did not fit the model's context window (004 §2.5g).

    Attributes:
        message: the provider's words.
        usage: what the provider charged for it (a success-shaped overflow), else empty.
    """

    def __init__(self, message: str, usage: cpb.Usage | None = None) -> None:
        """Carry the provider's message and the usage of a success-shaped overflow."""
        super().__init__(message)
        self.message = message
        self.usage = usage or cpb.Usage()


class RunFailed(Exception):
    """The run ends with this structured failure."""

    def __init__(self, failure: cpb.FailureInfo) -> None:
        """Carry failure."""
        super().__init__(failure.message)
        self.failure = failure


def failure(
    kind: str,
    message: str,
    *,
    retryable: bool = False,
    debug: str = "",
    reason: str = "",
    details_json: str = "",
) -> cpb.FailureInfo:
    """Return a structured failure (002 "Failures are structured").

    Args:
        kind: the stable kind (`max_turns`, `timeout`, `unavailable`, ...).
        message: user-safe text.
        retryable: whether the same run could succeed if started again.
        debug: operator text (a peer's own message).
        reason: the `ErrorReason` behind it, when a peer's error is.
        details_json: a JSON object with the kind's details ("" = none).
    """
    return cpb.FailureInfo(
        kind=kind,
        retryable=retryable,
        message=message,
        debug_message=debug,
        reason=reason,
        details_json=details_json,
    )


_BY_REASON: dict[str, tuple[str, bool, str]] = {
    Reason.RATE_LIMITED: (
        "rate_limited",
        True,
        "The model provider is rate limiting requests; try again later.",
    ),
    Reason.PROVIDER_UNAVAILABLE: ("unavailable", True, "The model provider is unavailable; try again later."),
    Reason.DEPENDENCY_UNAVAILABLE: ("unavailable", True, "A service the run depends on is unavailable."),
    Reason.CONTEXT_OVERFLOW: (
        "context_overflow",
        False,
        "The conversation no longer fits the model's context.",
    ),
    Reason.PROVIDER_AUTHENTICATION: ("authentication", False, "The model provider rejected the credentials."),
    Reason.SESSION_NOT_FOUND: ("session_gone", False, "The run's session no longer exists."),
}
_BY_STATUS: dict[Status, tuple[str, bool, str]] = {
    Status.UNAVAILABLE: (
        "unavailable",
        True,
        "A service the run depends on is unavailable; try again later.",
    ),
    Status.RESOURCE_EXHAUSTED: ("rate_limited", True, "A service the run depends on is over its limits."),
    Status.DEADLINE_EXCEEDED: ("timeout", True, "A call the run made timed out."),
    Status.INVALID_ARGUMENT: ("invalid_request", False, "The model request was rejected as invalid."),
    Status.FAILED_PRECONDITION: (
        "invalid_request",
        False,
        "The model request cannot be served as configured.",
    ),
    Status.UNAUTHENTICATED: (
        "authentication",
        False,
        "A service the run depends on refused its credentials.",
    ),
}


def failure_of(err: MeshError) -> cpb.FailureInfo:
    """Classify a peer's error into a structured failure (kind from the reason, then the status).

    The gateway's own limiter refusing a request larger than any budget it may ever have
    (RATE_LIMITED, metadata limiter=gateway, no RetryInfo) is not retryable: it never fits.
    """
    never_fits = (
        err.reason == Reason.RATE_LIMITED
        and err.metadata.get("limiter") == "gateway"
        and err.retry_after_seconds is None
    )
    if never_fits:
        return failure(
            "rate_limited",
            "The model request is larger than the model's whole input-token budget.",
            debug=err.message,
            reason=str(err.reason),
        )
    kind, retryable, message = _BY_REASON.get(
        str(err.reason),
        _BY_STATUS.get(err.status, ("internal", False, "The run failed because of an internal error.")),
    )
    return failure(kind, message, retryable=retryable, debug=err.message, reason=str(err.reason))


def overflow_failure(exc: ContextOverflow, retries: int) -> cpb.FailureInfo:
    """Return the failure of an overflow the run could not recover from (004 §2.5g)."""
    note = f" after {retries} recovered overflow(s)" if retries else ""
    return failure(
        "context_overflow",
        f"The conversation no longer fits the model's context{note}: {exc.message}",
        debug=exc.message,
        reason=str(Reason.CONTEXT_OVERFLOW),
    )


def guardrail_failure(result: Result) -> cpb.FailureInfo:
    """Return the run's failure for a guardrail result that ends it (kind, user-safe message, details).

    Kinds `guardrail_tripped` (a tripwire) and `guardrail_failed` (the guardrail erred: fail
    closed), from `core.guardrails.Result` (004 §2.6).
    """
    return failure(
        result.failure_kind,
        result.failure_message(),
        debug=result.error,
        details_json=json.dumps(result.failure_details()),
    )
