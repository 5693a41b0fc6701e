"""What a request the limiter does not admit is told (seed 002 "Model Client Throughput").

`AdaptiveTokenLimiter` (adaptive.py) decides when a request is refused; this module builds
the errors, the same for every store:

- RESOURCE_EXHAUSTED/RATE_LIMITED (`refusal`), with ErrorInfo metadata `limiter` "gateway",
  `provider`, `model_family`, `requested_tokens`, `budget_tokens` and `window_seconds`:
  `OverBudget` for a request larger than its bucket's budget (RetryInfo of one window) or
  than its maximum (no RetryInfo: it never fits), and `spent` for one that does not fit
  within its admission wait (RetryInfo: the earliest it could fit, at least one poll);
- UNAVAILABLE/DEPENDENCY_UNAVAILABLE (`unavailable`, RetryInfo 1 s) for a store that failed
  or never answered.
"""

from __future__ import annotations

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.gateway.limiter.rules import Attempt, LimiterKey, LimiterSettings


class OverBudget(MeshError):
    """A request larger than its bucket's current (or maximum) budget."""


def refusal(
    settings: LimiterSettings,
    key: LimiterKey,
    tokens: int,
    budget: int,
    retry_after: float | None,
    kind: type[MeshError],
    detail: str,
) -> MeshError:
    """Return the RESOURCE_EXHAUSTED/RATE_LIMITED of a request the budget does not admit.

    Args:
        settings: the limiter's figures (the model's family, the window).
        key: what the request is charged to.
        tokens: the input tokens it asked for.
        budget: the bucket's budget it was held to, in input tokens per window.
        retry_after: RetryInfo in seconds, or None for a request that never fits.
        kind: MeshError, or OverBudget for a request larger than the budget.
        detail: the message's end, after "the request".
    """
    family = settings.family(key.model)
    return kind(
        Status.RESOURCE_EXHAUSTED,
        Reason.RATE_LIMITED,
        f"gateway input-token limit of {key.provider}:{family}: the request {detail}",
        {
            "limiter": "gateway",
            "provider": key.provider,
            "model_family": family,
            "requested_tokens": str(tokens),
            "budget_tokens": str(budget),
            "window_seconds": f"{settings.window_seconds:g}",
        },
        retry_after_seconds=retry_after,
    )


def spent(
    settings: LimiterSettings, key: LimiterKey, tokens: int, attempt: Attempt, max_wait_seconds: float
) -> MeshError:
    """Return the refusal of `tokens` that do not fit within the admission wait.

    RetryInfo: the store's last answer's wait (the earliest they could fit), at least one
    poll interval.
    """
    return refusal(
        settings,
        key,
        tokens,
        attempt.budget_tokens,
        max(attempt.wait_seconds, settings.poll_seconds),
        MeshError,
        f"input-token budget of {attempt.budget_tokens} per {settings.window_seconds:g} s is spent; "
        f"{tokens} tokens do not fit within the {max(0.0, max_wait_seconds):g} s admission wait",
    )


def unavailable(what: str) -> MeshError:
    """UNAVAILABLE/DEPENDENCY_UNAVAILABLE for a store that failed (RetryInfo 1 s)."""
    return MeshError(
        Status.UNAVAILABLE,
        Reason.DEPENDENCY_UNAVAILABLE,
        f"the rate-limit store {what}; try again",
        {"limiter": "gateway"},
        retry_after_seconds=1.0,
    )
