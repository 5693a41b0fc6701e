"""How a peer's error becomes a run's structured failure (004 §2.10)."""

from __future__ import annotations

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.loop.failures import failure_of


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
