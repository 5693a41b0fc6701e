"""How a peer's error becomes a run's structured failure (004 §2.10)."""

from __future__ import annotations

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.loop.failures import failure_of, tool_refusal


def test_gateway_limiter_refusal_that_can_never_fit_is_not_retryable():
    err = MeshError(
        Status.RESOURCE_EXHAUSTED, Reason.RATE_LIMITED, "can never be admitted", {"limiter": "gateway"}
    )
    got = failure_of(err)
    assert got.kind == "rate_limited" and not got.retryable
    assert got.reason == "RATE_LIMITED" and got.debug_message == "can never be admitted"


def test_gateway_limiter_refusal_with_retry_info_is_retryable():
    err = MeshError(
        Status.RESOURCE_EXHAUSTED,
        Reason.RATE_LIMITED,
        "budget spent",
        {"limiter": "gateway"},
        retry_after_seconds=3.0,
    )
    assert failure_of(err).retryable


def test_provider_rate_limit_without_retry_after_stays_retryable():
    err = MeshError(Status.RESOURCE_EXHAUSTED, Reason.RATE_LIMITED, "429", {"http_status": "429"})
    got = failure_of(err)
    assert got.kind == "rate_limited" and got.retryable


# -- the tool service's errors for one call (decision 0046) ----------------------------------------


def test_tool_service_refusals_before_running_are_known_outcomes_the_model_reads():
    for err in (
        MeshError(Status.INVALID_ARGUMENT, Reason.CALL_ID_REUSED, "another call under this id"),
        MeshError(Status.INVALID_ARGUMENT, Reason.UNKNOWN_TOOL, "no such tool"),
        MeshError(Status.NOT_FOUND, Reason.SANDBOX_NOT_FOUND, "no sandbox"),
        MeshError(Status.FAILED_PRECONDITION, Reason.SANDBOX_STOPPED, "stopped"),
        MeshError(Status.FAILED_PRECONDITION, Reason.SANDBOX_UNAVAILABLE, "no isolation"),
        MeshError(
            Status.FAILED_PRECONDITION,
            Reason.WORKSPACE_NOT_WRITABLE,
            "belongs to root",
            {"field": "workspace"},
        ),
    ):
        refused = tool_refusal(err)
        assert refused is not None and refused.message == err.message and refused.failure is None, err


def test_tool_service_refusals_that_also_end_the_run():
    workspace = MeshError(
        Status.INVALID_ARGUMENT, Reason.INVALID_VALUE, "not absolute", {"field": "workspace"}
    )
    refused = tool_refusal(workspace)
    assert refused is not None and refused.failure is not None
    assert refused.failure.kind == "invalid_workspace" and refused.failure.reason == "INVALID_VALUE"
    creds = tool_refusal(MeshError(Status.UNAUTHENTICATED, Reason.UNAUTHENTICATED, "bad token"))
    assert creds is not None and creds.failure is not None and creds.failure.kind == "authentication"
    closing = MeshError(
        Status.UNAVAILABLE, Reason.SANDBOX_UNAVAILABLE, "shutting down", retry_after_seconds=1.0
    )
    refused = tool_refusal(closing)
    assert refused is not None and refused.failure is not None
    assert refused.failure.kind == "unavailable" and refused.failure.retryable


def test_tool_service_errors_after_a_call_may_have_started_are_unknown_outcomes():
    for err in (
        MeshError(Status.UNAVAILABLE, Reason.DEPENDENCY_UNAVAILABLE, "connection refused"),
        MeshError(Status.DEADLINE_EXCEEDED, Reason.CALLER_DEADLINE, "killed"),
        MeshError(Status.ABORTED, Reason.EXECUTION_IN_PROGRESS, "runs elsewhere"),
        MeshError(Status.INTERNAL, Reason.INTERNAL, "stream ended without a result"),
        MeshError(Status.RESOURCE_EXHAUSTED, Reason.INTERNAL, "received message larger than max"),
        MeshError(Status.CANCELLED, Reason.INTERNAL, "cancelled"),
    ):
        assert tool_refusal(err) is None, err


# -- the message names the peer that answered (MeshError.peer, set by runs/peers) ------------------


def test_a_session_store_refusal_names_the_session_store_and_why():
    err = MeshError(
        Status.INVALID_ARGUMENT,
        Reason.REQUEST_TOO_LARGE,
        "entries[0] is 3211447 bytes; the limit per entry is 3145728",
        peer="sessions",
    )
    got = failure_of(err)
    assert got.kind == "invalid_request" and not got.retryable
    assert got.message == "The session store rejected the run's request as invalid (too large)."
    assert got.reason == "REQUEST_TOO_LARGE" and got.debug_message == err.message


def test_the_gateways_refusals_stay_the_model_requests():
    err = MeshError(Status.INVALID_ARGUMENT, Reason.INVALID_REQUEST, "bad input", peer="gateway")
    assert failure_of(err).message == "The model request was rejected as invalid."
    err = MeshError(Status.FAILED_PRECONDITION, Reason.PROVIDER_NOT_CONFIGURED, "no key", peer="gateway")
    got = failure_of(err)
    assert (
        got.kind == "invalid_request" and got.message == "The model request cannot be served as configured."
    )


def test_each_peer_is_named_for_its_statuses_and_an_unknown_peer_stays_generic():
    tools = failure_of(MeshError(Status.FAILED_PRECONDITION, Reason.SANDBOX_FOREIGN, "taken", peer="tools"))
    assert tools.kind == "invalid_request"
    assert tools.message == "The tool service cannot serve the run's request in its state (sandbox foreign)."
    down = failure_of(
        MeshError(Status.UNAVAILABLE, Reason.DEPENDENCY_UNAVAILABLE, "refused", peer="sessions")
    )
    assert down.kind == "unavailable" and down.retryable
    assert down.message == "The session store is unavailable; try again later."
    odd = failure_of(MeshError(Status.NOT_FOUND, Reason.ENTRY_NOT_FOUND, "no entry", peer="sessions"))
    assert odd.kind == "internal" and odd.message == "The session store failed the run's request (NOT_FOUND)."
    nobody = failure_of(MeshError(Status.INVALID_ARGUMENT, Reason.INVALID_VALUE, "bad"))
    assert nobody.kind == "invalid_request" and "model" not in nobody.message
    assert failure_of(MeshError(Status.INTERNAL, Reason.INTERNAL, "x")).message == (
        "The run failed because of an internal error."
    )
