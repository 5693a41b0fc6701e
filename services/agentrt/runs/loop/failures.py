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
- `failure_of`: a peer's `MeshError` classified: the kind from its reason, then its status;
  the message names the peer that answered (`MeshError.peer`, set by runs/peers).
- `tool_refusal`: the tool service's error for one call classified: refused before it ran
  (`ToolCallRefused`: its outcome is known, and whether the refusal also ends the run), or
  None (its outcome is unknown). Decision 0046.
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
    # The run holds its session by generation (decision 0058): deleted, and maybe created
    # again under the same id, which is another session.
    Reason.STALE_GENERATION: ("session_gone", False, "The run's session was deleted."),
}
#: The kind and retryable flag of a peer's error by status (its reason not in _BY_REASON).
_BY_STATUS: dict[Status, tuple[str, bool]] = {
    Status.UNAVAILABLE: ("unavailable", True),
    Status.RESOURCE_EXHAUSTED: ("rate_limited", True),
    Status.DEADLINE_EXCEEDED: ("timeout", True),
    Status.INVALID_ARGUMENT: ("invalid_request", False),
    Status.FAILED_PRECONDITION: ("invalid_request", False),
    Status.UNAUTHENTICATED: ("authentication", False),
}
#: The user-safe message by status, "{peer}" naming the service that answered (_PEER_NAMES).
_MESSAGES: dict[Status, str] = {
    Status.UNAVAILABLE: "{peer} is unavailable; try again later.",
    Status.RESOURCE_EXHAUSTED: "{peer} is over its limits.",
    Status.DEADLINE_EXCEEDED: "A call to {peer} timed out.",
    Status.INVALID_ARGUMENT: "{peer} rejected the run's request as invalid ({why}).",
    Status.FAILED_PRECONDITION: "{peer} cannot serve the run's request in its state ({why}).",
    Status.UNAUTHENTICATED: "{peer} refused the run's credentials.",
}
#: Messages of the gateway's refusals: the model request was refused (the run's wording
#: before peers were named, kept: a model request is what the user can change).
_GATEWAY_MESSAGES: dict[Status, str] = {
    Status.INVALID_ARGUMENT: "The model request was rejected as invalid.",
    Status.FAILED_PRECONDITION: "The model request cannot be served as configured.",
}
#: How a message names each peer of the run loop (runs/peers: `MeshError.peer`).
_PEER_NAMES = {"gateway": "the model gateway", "tools": "the tool service", "sessions": "the session store"}
#: How a message says why, for the reasons worth words of their own (else the reason, lower case).
_WHY: dict[str, str] = {
    Reason.REQUEST_TOO_LARGE: "too large",
    Reason.INVALID_ENTRY: "an entry is invalid",
    Reason.MISSING_FIELD: "a required field is missing",
}


def _status_message(err: MeshError) -> str:
    """The user-safe message of a peer's error classified by its status: who answered, and why."""
    if err.peer == "gateway" and err.status in _GATEWAY_MESSAGES:
        return _GATEWAY_MESSAGES[err.status]
    if err.status not in _MESSAGES and not err.peer:
        return "The run failed because of an internal error."
    unnamed = f"the {err.peer} service" if err.peer else "a service the run depends on"
    peer = _PEER_NAMES.get(err.peer, unnamed)
    why = _WHY.get(str(err.reason)) or str(err.reason).lower().replace("_", " ") or "no reason given"
    text = _MESSAGES.get(err.status, "{peer} failed the run's request ({status}).")
    text = text.format(peer=peer, why=why, status=err.status)
    return text[0].upper() + text[1:]


def failure_of(err: MeshError) -> cpb.FailureInfo:
    """Classify a peer's error into a structured failure (kind from the reason, then the status).

    The kind and retryable flag are stable (the reason's, else the status's: `unavailable`,
    `rate_limited`, `timeout`, `invalid_request`, `authentication`, else `internal`). The
    message of a status-classified error names the service that answered it
    (`MeshError.peer`: "The session store rejected the run's request as invalid (too large).")
    and why; the gateway's INVALID_ARGUMENT and FAILED_PRECONDITION are the model request's.
    The reason and the peer's own message stay in `reason` and `debug_message`.

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
    by_reason = _BY_REASON.get(str(err.reason))
    if by_reason is not None:
        kind, retryable, message = by_reason
        if err.reason == Reason.DEPENDENCY_UNAVAILABLE and err.peer:
            message = _status_message(err)  # which service: "The session store is unavailable; ..."
    else:
        kind, retryable = _BY_STATUS.get(err.status, ("internal", False))
        message = _status_message(err)
    return failure(kind, message, retryable=retryable, debug=err.message, reason=str(err.reason))


class ToolCallRefused(Exception):
    """The tool service refused a call before running it: its outcome is known (it did not run).

    Attributes:
        message: why, in the tool service's words (the model reads them).
        failure: the run's failure when the refusal also ends the run (a workspace no tool
            can use, refused credentials, a tool service shutting down), else None: the
            model reads the refusal and the run goes on.
    """

    def __init__(self, message: str, failure: cpb.FailureInfo | None = None) -> None:
        """Carry the refusal's words and the run's failure, if it ends the run."""
        super().__init__(message)
        self.message = message
        self.failure = failure


#: ExecuteTool statuses the tool service answers only before a call runs and before anything
#: is journaled (docs/services/tools.md "RPCs", "The journal"): bad input, an unknown sandbox
#: or workspace, a wrong state (no usable sandbox, a stopped one, a workspace commands cannot
#: write); the interceptor's refusals come before the handler.
REFUSED_BEFORE_RUNNING = frozenset(
    {
        Status.INVALID_ARGUMENT,
        Status.NOT_FOUND,
        Status.FAILED_PRECONDITION,
        Status.UNAUTHENTICATED,
        Status.PERMISSION_DENIED,
    }
)
#: UNAVAILABLE with this reason is the tool service's own answer to a call it did not run
#: (it is shutting down, or the concurrent attempt it joined could not run; docs/errors.md).
#: A transport failure carries no reason, and stays an unknown outcome.
_NOT_RUN_WHEN_UNAVAILABLE = Reason.SANDBOX_UNAVAILABLE


def tool_refusal(err: MeshError) -> ToolCallRefused | None:
    """Classify the tool service's error for one call (ExecuteTool): refused before it ran, or unknown.

    Refused (a `ToolCallRefused`): a status of REFUSED_BEFORE_RUNNING, or UNAVAILABLE/
    SANDBOX_UNAVAILABLE. Of those, these also end the run: a refused workspace (metadata
    `field` = `workspace`: kind `invalid_workspace`) other than WORKSPACE_NOT_WRITABLE (only
    commands are refused there; the file tools work, so the model reads it); refused
    credentials (UNAUTHENTICATED, PERMISSION_DENIED) and a tool service shutting down
    (UNAVAILABLE), as `failure_of` classifies them. Every other error (UNAVAILABLE from the
    transport, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, INTERNAL, CANCELLED, ...) may
    come after the call started: None, its outcome is unknown. Decision 0046.
    """
    unavailable = err.status == Status.UNAVAILABLE and err.reason == _NOT_RUN_WHEN_UNAVAILABLE
    if err.status not in REFUSED_BEFORE_RUNNING and not unavailable:
        return None
    if err.metadata.get("field") == "workspace" and err.reason != Reason.WORKSPACE_NOT_WRITABLE:
        return ToolCallRefused(
            err.message,
            failure(
                "invalid_workspace",
                f"The run's workspace cannot be used: {err.message}",
                debug=str(err),
                reason=str(err.reason),
            ),
        )
    if unavailable or err.status in (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED):
        return ToolCallRefused(err.message, failure_of(err))
    return ToolCallRefused(err.message)


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
