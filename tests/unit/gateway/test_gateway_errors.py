"""Provider exceptions -> domain errors, Retry-After parsing, and the retry loop (no network)."""

from __future__ import annotations

import json

import anthropic
import httpx2
import openai
import pytest

from agentrt.core.errors import Reason, Status
from agentrt.gateway.errors import ProviderError, classify, is_overflow_text, retry_after_seconds
from agentrt.gateway.retry import RetryContext, RetryPolicy, next_delay, with_retries

URL = "http://provider.test/v1/x"


def _response(status: int, body: dict, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, json=body, headers=headers or {}, request=httpx2.Request("POST", URL))


def _openai(status: int, code: str | None, message: str, headers: dict[str, str] | None = None) -> Exception:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return openai.APIStatusError(message, response=_response(status, body, headers), body=body["error"])


def _anthropic(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Exception:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return anthropic.APIStatusError(message, response=_response(status, body, headers), body=body)


@pytest.mark.parametrize(
    ("exc", "status", "reason", "retryable"),
    [
        (
            _openai(429, "rate_limit_exceeded", "slow down", {"retry-after-ms": "1500"}),
            "RESOURCE_EXHAUSTED",
            "RATE_LIMITED",
            True,
        ),
        (
            _openai(429, "insufficient_quota", "You exceeded your current quota"),
            "RESOURCE_EXHAUSTED",
            "RATE_LIMITED",
            False,
        ),
        (
            _openai(400, "context_length_exceeded", "Your input exceeds the context window of this model."),
            "INVALID_ARGUMENT",
            "CONTEXT_OVERFLOW",
            False,
        ),
        (
            _openai(400, None, "This model's maximum context length is 8192 tokens."),
            "INVALID_ARGUMENT",
            "CONTEXT_OVERFLOW",
            False,
        ),
        (
            _openai(400, "invalid_value", "Invalid value for 'input'."),
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            False,
        ),
        (
            _openai(404, "model_not_found", "The model does not exist"),
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            False,
        ),
        (
            _openai(401, "invalid_api_key", "Incorrect API key"),
            "UNAUTHENTICATED",
            "PROVIDER_AUTHENTICATION",
            False,
        ),
        (_openai(500, None, "server error"), "UNAVAILABLE", "PROVIDER_UNAVAILABLE", True),
        (_anthropic(529, "overloaded_error", "Overloaded"), "UNAVAILABLE", "PROVIDER_UNAVAILABLE", True),
        (
            _anthropic(400, "invalid_request_error", "prompt is too long: 215017 tokens > 200000 maximum"),
            "INVALID_ARGUMENT",
            "CONTEXT_OVERFLOW",
            False,
        ),
        (
            _anthropic(400, "invalid_request_error", "messages: text content blocks must be non-empty"),
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            False,
        ),
        (
            _anthropic(429, "rate_limit_error", "slow down", {"retry-after": "7"}),
            "RESOURCE_EXHAUSTED",
            "RATE_LIMITED",
            True,
        ),
        # an error event inside a 200 stream carries only its body
        (_anthropic(200, "overloaded_error", "Overloaded"), "UNAVAILABLE", "PROVIDER_UNAVAILABLE", True),
        (
            openai.APIConnectionError(request=httpx2.Request("POST", URL)),
            "UNAVAILABLE",
            "PROVIDER_UNAVAILABLE",
            True,
        ),
        (
            anthropic.APITimeoutError(request=httpx2.Request("POST", URL)),
            "UNAVAILABLE",
            "PROVIDER_UNAVAILABLE",
            True,
        ),
        (ValueError("Expecting value: line 1 column 2"), "UNAVAILABLE", "PROVIDER_UNAVAILABLE", True),
    ],
)
def test_classify(exc, status, reason, retryable):
    err = classify(exc, "p")
    assert (str(err.status), str(err.reason), err.retryable) == (status, reason, retryable)
    assert err.metadata["provider"] == "p"


def test_retry_after_values():
    assert classify(_openai(429, None, "x", {"retry-after-ms": "1500"}), "p").retry_after_seconds == 1.5
    assert (
        classify(_anthropic(429, "rate_limit_error", "x", {"retry-after": "7"}), "p").retry_after_seconds == 7
    )
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_overflow_markers_need_the_providers_words():
    assert is_overflow_text("prompt is too long: 1 tokens > 0 maximum")
    assert is_overflow_text("stop_reason model_context_window_exceeded")
    assert not is_overflow_text("Invalid value for 'temperature'")


def _err(retryable: bool = True, retry_after: float | None = None) -> ProviderError:
    return ProviderError(
        Status.UNAVAILABLE, Reason.PROVIDER_UNAVAILABLE, "down", {}, retry_after, retryable=retryable
    )


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def _run(failures: list[ProviderError], policy: RetryPolicy, deadline: float | None, t: FakeTime):
    pending = list(failures)

    async def attempt() -> str:
        if pending:
            raise pending.pop(0)
        return "ok"

    return await with_retries(attempt, policy, deadline, RetryContext("p", "m"), clock=t.clock, sleep=t.sleep)


async def test_retries_back_off_exponentially_with_jitter():
    t = FakeTime()
    policy = RetryPolicy(max_retries=3, initial_backoff_seconds=1.0, max_backoff_seconds=1.5)
    assert await _run([_err(), _err(), _err()], policy, None, t) == ("ok", 3)
    assert 0.5 <= t.sleeps[0] <= 1.0 and 0.75 <= t.sleeps[1] <= 1.5 and 0.75 <= t.sleeps[2] <= 1.5
    exact = RetryPolicy(initial_backoff_seconds=1.0, max_backoff_seconds=8.0)
    assert [exact.delay(n, None, rand=lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert exact.delay(1, None, rand=lambda: 0.0) == 0.5  # jitter keeps at least half


async def test_retry_after_is_honoured_and_spent_retries_raise():
    t = FakeTime()
    policy = RetryPolicy(max_retries=1, initial_backoff_seconds=0.1)
    assert await _run([_err(retry_after=4.0)], policy, None, t) == ("ok", 1)
    assert t.sleeps == [4.0]
    with pytest.raises(ProviderError):
        await _run([_err(), _err()], policy, None, FakeTime())


async def test_no_retry_past_the_deadline_or_for_permanent_errors():
    policy = RetryPolicy(max_retries=5, initial_backoff_seconds=0.1)
    t = FakeTime()
    with pytest.raises(ProviderError):
        await _run([_err(retry_after=10.0)], policy, 5.0, t)
    assert t.sleeps == []
    with pytest.raises(ProviderError):
        await _run([_err(retryable=False)], policy, None, t)
    assert t.sleeps == []
    assert next_delay(_err(retry_after=120.0), 0, RetryPolicy(max_retry_after_seconds=60), None) is None


# -- the gateway's own encoding failures ---------------------------------------------------


def _raised(fn) -> BaseException:
    try:
        fn()
    except (ValueError, TypeError) as exc:
        return exc
    raise AssertionError("nothing raised")


@pytest.mark.parametrize(
    "exc",
    [
        _raised(lambda: json.dumps({"n": float("nan")}, allow_nan=False)),
        _raised(lambda: json.dumps({"n": object()})),
    ],
    ids=["non-finite", "not-serializable"],
)
def test_an_error_raised_by_the_json_encoder_is_the_gateways_not_retried(exc):
    err = classify(exc, "openai")
    assert (err.status, err.reason, err.retryable) == (Status.INTERNAL, Reason.INTERNAL, False)
    assert err.metadata == {"provider": "openai", "origin": "gateway"}
    assert "nothing was sent" in err.message and type(exc).__name__ in err.message


def test_a_response_that_is_not_json_is_still_the_providers():
    err = classify(_raised(lambda: json.loads('{"half": ')), "openai")
    assert (err.status, err.reason, err.retryable) == (Status.UNAVAILABLE, Reason.PROVIDER_UNAVAILABLE, True)
    assert "malformed response" in err.message
