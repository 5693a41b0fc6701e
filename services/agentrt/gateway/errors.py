"""Provider failures as domain errors (seed 002 "Provider Adapters"; 004 §2.5g, §2.10).

`classify(exc)` turns an exception from the `openai` or `anthropic` SDK (or a malformed
stream) into a `ProviderError`, a `MeshError` that also says whether a retry may help:

| provider answer                                   | status / reason                          | retryable |
| ------------------------------------------------- | ---------------------------------------- | --------- |
| 429 (not a spent quota)                           | RESOURCE_EXHAUSTED / RATE_LIMITED         | yes       |
| 5xx, 529 overloaded, 408/409, connection, timeout | UNAVAILABLE / PROVIDER_UNAVAILABLE        | yes       |
| 4xx whose message names the context window        | INVALID_ARGUMENT / CONTEXT_OVERFLOW       | no        |
| any other 4xx                                     | INVALID_ARGUMENT / INVALID_REQUEST        | no        |
| 401, 403                                          | UNAUTHENTICATED / PROVIDER_AUTHENTICATION | no        |

Context overflow is detected from the provider's own words (004 §2.5g): a plain 400 is a
malformed request, and treating it as an overflow would hide a bug behind compaction. The
known wordings (`OVERFLOW_PATTERNS`, matched case-insensitively against the error's code
and message) cover OpenAI, Anthropic, Azure, Gemini, vLLM / sglang, llama.cpp and other
OpenAI-compatible servers.

The gateway's own failure is never the provider's: a request the gateway could not encode is
INTERNAL/INTERNAL with metadata `origin: gateway`, never retried, and nothing was sent
(`encoding_failure`). That is a `UnicodeEncodeError`, or a ValueError/TypeError raised inside
the JSON encoder (`json.encoder` on the traceback: the SDKs encode the body with
`allow_nan=False` before sending it, so a NaN or an object JSON cannot hold fails there).
Validation reads every JSON text strictly, so neither can come from a caller's input: it is
the gateway's bug, not bad input, and never "<provider> sent a malformed response".
Retry-After (`retry-after-ms`, then `retry-after` in seconds or as an HTTP date) becomes
`retry_after_seconds`, so the caller gets a RetryInfo. Error events inside a stream (status
200 with an error body) are classified by the body's type or code.
"""

from __future__ import annotations

import email.utils
import json
import json.encoder
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from agentrt.core.errors import MeshError, Reason, Status

#: What marks a context-window overflow in a provider's error code or message, as regular
#: expressions searched in the lower-cased text. Examples of each, as the servers word them:
OVERFLOW_PATTERNS = tuple(
    re.compile(p)
    for p in (
        # OpenAI's context_length_exceeded family, "This model's maximum context length is
        # 4096 tokens" (also vLLM, DeepSeek, Mistral, Ollama), "Please reduce the length of
        # the messages" (OpenAI, Groq), "Your input exceeds the context window".
        r"context_length_exceeded",
        r"maximum context length",
        r"context[ _]window",
        r"reduce the length of the messages",
        # Anthropic: "prompt is too long: 215017 tokens > 200000 maximum",
        # model_context_window_exceeded; Bedrock: "Input is too long for requested model".
        r"prompt is too long",
        r"input is too long",
        # llama.cpp: "the request exceeds the available context size"; others
        # "exceeds the context", exceed_context_size.
        r"exceeds? the (available )?context",
        r"exceed_context_size",
        # Azure: "Input tokens exceed the configured limit of 272000 tokens".
        r"input tokens? exceeds? the configured limit",
        # sglang / vLLM: "The input (5000 tokens) is longer than the model's context length
        # (4096 tokens)", "The decoder prompt (length 5000) is longer than the maximum model
        # length of 4096".
        r"longer than the model'?s context length",
        r"longer than the maximum model length",
        # Gemini: "The input token count (1048577) exceeds the maximum number of tokens
        # allowed (1048576)".
        r"input token count.{0,40}exceeds the maximum number of tokens",
        # Perplexity-style: "The total length of all messages is too long".
        r"total length of (all )?(the )?messages (is|are) too long",
    )
)

_RATE_TYPES = {"rate_limit_error", "rate_limit_exceeded", "requests", "tokens"}
_UNAVAILABLE_TYPES = {"overloaded_error", "api_error", "server_error", "service_unavailable", "timeout_error"}
_AUTH_TYPES = {"authentication_error", "permission_error", "invalid_api_key"}


#: ErrorInfo metadata `origin` of a ProviderError the gateway caused itself.
GATEWAY_ORIGIN = "gateway"


@dataclass
class ProviderError(MeshError):
    """A MeshError from a provider call.

    Attributes:
        retryable: whether the same request may succeed later (rate limit, overload, 5xx).
        provider: the provider key, e.g. "anthropic".
    """

    retryable: bool = False
    provider: str = ""


def unavailable(provider: str, message: str, *, retryable: bool = True) -> ProviderError:
    """Build UNAVAILABLE/PROVIDER_UNAVAILABLE, e.g. for a stream that ended early."""
    return ProviderError(
        Status.UNAVAILABLE,
        Reason.PROVIDER_UNAVAILABLE,
        message,
        {"provider": provider},
        retryable=retryable,
        provider=provider,
    )


def is_overflow_text(text: str) -> bool:
    """Return True when an error message or code names a context-window overflow (any case)."""
    low = text.lower()
    return any(p.search(low) for p in OVERFLOW_PATTERNS)


def context_overflow(provider: str, message: str, **metadata: str) -> ProviderError:
    """Build INVALID_ARGUMENT/CONTEXT_OVERFLOW (never retried: the same request fails the same way)."""
    return ProviderError(
        Status.INVALID_ARGUMENT,
        Reason.CONTEXT_OVERFLOW,
        f"{provider}: {message}",
        {"provider": provider, **metadata},
        provider=provider,
    )


def encoding_failure(provider: str, exc: BaseException) -> ProviderError:
    """Build the gateway's own failure to encode a request for provider (not retried, nothing sent).

    It is INTERNAL/INTERNAL with metadata `origin: gateway`: the metrics count it as the
    gateway's (metrics.error_origin) and the limiter gives its reservation back.
    """
    detail = type(exc).__name__ if isinstance(exc, UnicodeError) else f"{type(exc).__name__}: {exc}"
    return ProviderError(
        Status.INTERNAL,
        Reason.INTERNAL,
        f"the gateway could not encode the request for {provider} ({detail}); nothing was sent",
        {"provider": provider, "origin": GATEWAY_ORIGIN},
        retryable=False,
        provider=provider,
    )


def classify(exc: BaseException, provider: str) -> ProviderError:
    """Map an SDK exception (or a malformed-stream error) to a ProviderError.

    Args:
        exc: what the SDK raised; unknown exceptions count as an unavailable provider.
        provider: the provider key, recorded in the error's metadata.

    Returns:
        The classified error (see the module docstring's table).
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, UnicodeEncodeError) or (
        isinstance(exc, (ValueError, TypeError)) and _raised_in_json_encoder(exc)
    ):
        # Raised while the SDK encoded our request body: ours, not the provider's.
        return encoding_failure(provider, exc)
    if isinstance(exc, (openai.APIConnectionError, anthropic.APIConnectionError)):
        return unavailable(provider, f"{provider} could not be reached: {exc}")
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    headers = _headers(exc)
    kind, code, message = _error_fields(body)
    message = message or str(exc) or type(exc).__name__
    if isinstance(exc, (openai.APIError, anthropic.APIError)):
        return _from_status(provider, status, kind, code, message, headers)
    # A stream whose bytes were not valid SSE/JSON, or any other transport surprise.
    return unavailable(provider, f"{provider} sent a malformed response: {type(exc).__name__}: {exc}")


_ENCODER_FILE = json.encoder.__file__


def _raised_in_json_encoder(exc: BaseException) -> bool:
    """Return True when exc passed through the standard JSON encoder (an SDK encoding our body).

    Nothing of a response is JSON-encoded by a raising encoder (the adapters' own `dumps`
    allow every value a parsed response holds), so this marks a request that was never sent.
    """
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _ENCODER_FILE:
            return True
        tb = tb.tb_next
    return False


def from_error_body(
    provider: str, error: Mapping[str, Any] | None, status: int | None = None
) -> ProviderError:
    """Classify an error object found inside a response (OpenAI `response.failed`, stream events)."""
    kind, code, message = _error_fields({"error": dict(error or {})})
    return _from_status(provider, status, kind, code, message or "provider reported an error", {})


def _from_status(
    provider: str, status: int | None, kind: str, code: str, message: str, headers: Mapping[str, str]
) -> ProviderError:
    meta = {"provider": provider}
    if status is not None and status != 200:
        meta["http_status"] = str(status)
    if code:
        meta["provider_code"] = code
    retry_after = retry_after_seconds(headers)
    text = f"{provider}: {message}"
    labels = {kind, code}
    if status in (401, 403) or labels & _AUTH_TYPES:
        return ProviderError(
            Status.UNAUTHENTICATED, Reason.PROVIDER_AUTHENTICATION, text, meta, provider=provider
        )
    if status == 429 or labels & _RATE_TYPES:
        # A spent quota does not come back by waiting a few seconds.
        spent = "insufficient_quota" in labels
        return ProviderError(
            Status.RESOURCE_EXHAUSTED,
            Reason.RATE_LIMITED,
            text,
            meta,
            retry_after,
            retryable=not spent,
            provider=provider,
        )
    if is_overflow_text(f"{code} {message}"):
        return ProviderError(Status.INVALID_ARGUMENT, Reason.CONTEXT_OVERFLOW, text, meta, provider=provider)
    transient = (
        status is not None and (status >= 500 or status in (408, 409))
    ) or labels & _UNAVAILABLE_TYPES
    if not transient and status is not None and 400 <= status < 500:
        return ProviderError(Status.INVALID_ARGUMENT, Reason.INVALID_REQUEST, text, meta, provider=provider)
    # 5xx, 408/409, an overloaded/unavailable type, or status 200 with an error we do not
    # recognize (a stream error event), or no status: all worth retrying.
    return ProviderError(
        Status.UNAVAILABLE,
        Reason.PROVIDER_UNAVAILABLE,
        text,
        meta,
        retry_after,
        retryable=True,
        provider=provider,
    )


def _headers(exc: BaseException) -> Mapping[str, str]:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers if headers is not None else {}


def _error_fields(body: object) -> tuple[str, str, str]:
    """Return (type, code, message) from an OpenAI or Anthropic error body."""
    if isinstance(body, str):
        text = body
        try:
            body = json.loads(text)
        except ValueError:
            return "", "", text
    if not isinstance(body, Mapping):
        return "", "", ""
    error = body.get("error", body)
    if not isinstance(error, Mapping):
        return "", "", str(error)
    kind = error.get("type") or ""
    code = error.get("code") or ""
    details = error.get("details")
    if not code and isinstance(details, Mapping):
        code = details.get("error_code") or ""
    message = error.get("message") or ""
    return str(kind), str(code), str(message)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Read how long the provider asked us to wait, in seconds; None when it did not say.

    Reads `retry-after-ms` (OpenAI), then `retry-after` as seconds or as an HTTP date.
    """
    try:
        ms = headers.get("retry-after-ms")
        if ms:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - (time.time() if now is None else now))
