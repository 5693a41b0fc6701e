"""The interface every provider adapter implements (seed 002 "Provider Adapters").

An adapter is stateless with respect to conversation history: every request carries the
whole transcript. It translates a validated provider-neutral `ModelRequest` into one SDK
call and the answer into a canonical `ModelResponse` (blocks in order, canonical stop
reason, usage), raising `ProviderError` (agentrt.gateway.errors) on failure.

Streams yield `StreamGenerateResponse` deltas (text, thinking, tool-call fragments) as
previews and end with exactly one `ModelResponse`, the accepted response. A provider
stream that ends without its terminal event raises instead: there is no accepted
response, whatever the deltas showed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

#: What a provider stream yields: deltas, then exactly one ModelResponse, last.
StreamItem = g.StreamGenerateResponse | c.ModelResponse


@dataclass(frozen=True)
class TokenCount:
    """A counted input.

    Attributes:
        input_tokens: input tokens of the request.
        kind: how exact (agentrt.v1.TokenCountKind).
    """

    input_tokens: int
    kind: int


@dataclass(frozen=True)
class Call:
    """One call as an adapter sees it.

    Attributes:
        request: the validated provider-neutral request.
        model: the resolved model id (the provider default when the request named none).
        timeout_seconds: the longest this HTTP call may take, in seconds.
    """

    request: g.ModelRequest
    model: str
    timeout_seconds: float


class Provider(Protocol):
    """A model provider behind the gateway."""

    name: str
    default_model: str
    counts_tokens: bool
    streams: bool

    def model_id(self, requested: str) -> str:
        """Return the model id that serves a request naming `requested` ("" = none named).

        A remote provider passes any name on (its own answer refuses one it does not
        serve); the local provider serves the names of its one model (decision 0047).

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE (metadata `field` = `model.model`) for
                a name this provider does not serve.
        """
        ...

    async def generate(self, call: Call) -> c.ModelResponse:
        """Make one blocking call and return the canonical response.

        Raises:
            ProviderError: classified provider failure.
        """
        ...

    def stream(self, call: Call) -> AsyncIterator[StreamItem]:
        """Stream deltas, then exactly one ModelResponse.

        Raises:
            ProviderError: classified provider failure, or a stream that ended early.
        """
        ...

    async def count_tokens(self, call: Call) -> TokenCount:
        """Count the request's input tokens.

        Raises:
            MeshError: FAILED_PRECONDITION/TOKEN_COUNTING_UNSUPPORTED where the provider cannot.
            ProviderError: classified provider failure.
        """
        ...

    async def close(self) -> None:
        """Release connections and models."""
        ...


def text_delta(text: str) -> g.StreamGenerateResponse:
    """Return a text delta."""
    return g.StreamGenerateResponse(text_delta=text)


def thinking_delta(text: str) -> g.StreamGenerateResponse:
    """Return a reasoning delta."""
    return g.StreamGenerateResponse(thinking_delta=text)


def tool_delta(index: int, name: str, fragment: str) -> g.StreamGenerateResponse:
    """Return a tool-call fragment (name only on the call's first delta)."""
    return g.StreamGenerateResponse(
        tool_call_delta=g.ToolCallDelta(index=index, name=name, arguments_delta=fragment)
    )


def sdk_kwargs(
    params: Mapping[str, Any], keep: Sequence[str] = (), required: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return SDK keyword arguments that send `params` as the request body through `extra_body`.

    Why: the official SDKs walk every typed argument against its TypedDict before sending
    (openai `_transform`), which costs milliseconds per call and grows with the transcript and
    the tool schemas; even a small argument costs tens of microseconds when its annotation is a
    large union of literals (`model`), whose hash the transform's caches compute per call. The
    adapters build every value as plain JSON already, and the transform is an identity on them
    (their param types declare no aliases or formats), so passing them as `extra_body` sends
    the same body while the SDK still makes the HTTP call, owns the connection pool and
    raises its error classes. Only what decides how the SDK handles the call stays a typed
    argument: `stream` and `timeout`, which the adapters pass themselves, and `keep`.

    Args:
        params: the adapter's keyword arguments (may hold an `extra_body` of its own, whose
            values win).
        keep: names passed as typed arguments rather than in the body's extra part.
        required: placeholders for arguments the SDK signature requires (the SDK's `omit`,
            which its transform skips, or e.g. `messages=[]`); the real value rides in
            extra_body, which wins when the body is merged.

    Returns:
        New keyword arguments; `params` is not modified.
    """
    out = {k: params[k] for k in keep if k in params}
    extra = {k: v for k, v in params.items() if k not in out and k != "extra_body"}
    extra.update(params.get("extra_body") or {})
    for name, placeholder in (required or {}).items():
        if name in extra:
            out[name] = placeholder
    if extra:
        out["extra_body"] = extra
    return out
