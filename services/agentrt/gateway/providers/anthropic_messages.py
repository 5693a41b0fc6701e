"""The Anthropic Messages adapter (official `anthropic` SDK; seed 002 "Provider Adapters").

History rendering: `system` is the request's system text plus any system-role messages;
user and assistant blocks become text, image, tool_use (`input` parsed from the exact
argument string), tool_result (with `is_error`) and signed thinking / redacted_thinking
blocks replayed as written; raw Anthropic blocks go back verbatim. Tool results lead their
user message, and consecutive messages of one role are merged, as the API requires.

Response mapping: text, thinking (with signature), redacted thinking, tool_use and raw
blocks in order. A tool_use's arguments are cut from the response body's own bytes
(`jsonspans`), or joined from the stream's `input_json_delta` fragments: the exact text.
stop_reason: tool_use -> TOOL_USE; max_tokens -> MAX_TOKENS (a truncation, never an
overflow: 004 §2.7e); refusal -> REFUSAL; end_turn, stop_sequence, pause_turn -> END_TURN.
model_context_window_exceeded (generation hit the context window mid-response) is not an
answer but an overflow (004 §2.5g): the call fails INVALID_ARGUMENT/CONTEXT_OVERFLOW,
carrying the marker, so compact-and-retry can recover where resending could not. A stream must open
with message_start, close every block it opened, report a stop reason and end with
message_stop; anything less is an error with no accepted response (seed 002 "Provider
Capability Differences"). count_tokens is Anthropic's own estimate: PROVIDER_ESTIMATE.

The current SDK no longer declares temperature/top_p; when a request sets them they are
sent through `extra_body`, except to the current-generation models that reject them
(capabilities.py), which never see them. Structured output goes in `output_config` with
every object closed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic

from agentrt.gateway import capabilities as caps
from agentrt.gateway.config import ProviderSettings
from agentrt.gateway.errors import classify, context_overflow, unavailable
from agentrt.gateway.providers import canonical as cn
from agentrt.gateway.providers.jsonspans import content_sources
from agentrt.gateway.providers.provider import (
    Call,
    StreamItem,
    TokenCount,
    sdk_kwargs,
    text_delta,
    thinking_delta,
    tool_delta,
)
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

PROVIDER = "anthropic"
#: Typed arguments (the SDK reads `model` and `max_tokens` itself); the rest rides in extra_body
#: (provider.sdk_kwargs), `messages` with a placeholder since the SDK requires it.
_KEEP = ("model", "max_tokens")
_REQUIRED: dict[str, Any] = {"messages": []}
#: The success-shaped overflow (004 §2.5g): raised as CONTEXT_OVERFLOW, never answered.
_WINDOW_EXCEEDED = "model_context_window_exceeded"
_STOPS = {
    "tool_use": c.STOP_REASON_TOOL_USE,
    "max_tokens": c.STOP_REASON_MAX_TOKENS,
    "refusal": c.STOP_REASON_REFUSAL,
    "end_turn": c.STOP_REASON_END_TURN,
    "stop_sequence": c.STOP_REASON_END_TURN,
    "pause_turn": c.STOP_REASON_END_TURN,
}


def render(request: g.ModelRequest) -> tuple[str, list[dict[str, Any]]]:
    """Return (system text, Messages API messages) for a request."""
    system = [request.system] if request.system else []
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == c.ROLE_SYSTEM:
            text = cn.joined_text(message.content)
            if text:
                system.append(text)
            continue
        role = "user" if message.role == c.ROLE_USER else "assistant"
        blocks = [b for b in (_render_block(x) for x in message.content) if b is not None]
        if role == "user":
            # tool_result blocks must come first in a user turn.
            blocks.sort(key=lambda b: b.get("type") != "tool_result")
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    return "\n\n".join(system), messages


def _render_block(block: c.ContentBlock) -> dict[str, Any] | None:
    kind = block.WhichOneof("block")
    if kind == "text":
        # The API rejects empty text blocks.
        return {"type": "text", "text": block.text.text} if block.text.text else None
    if kind == "image":
        image = block.image
        if image.url.startswith("data:"):
            # Anthropic fetches http(s) URLs only; a data URL travels as its base64 payload.
            head, _, data = image.url.partition(",")
            media_type = head[len("data:") :].split(";", 1)[0]
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        if image.url:
            return {"type": "image", "source": {"type": "url", "url": image.url}}
        data = base64.b64encode(image.data).decode()
        return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": data}}
    if kind == "tool_use":
        call = block.tool_use
        return {
            "type": "tool_use",
            "id": cn.safe_id(call.call_id),
            "name": call.name,
            "input": cn.args_object(call),
        }
    if kind == "tool_result":
        result = block.tool_result
        return {
            "type": "tool_result",
            "tool_use_id": cn.safe_id(result.call_id),
            "content": result.content,
            "is_error": result.is_error,
        }
    if kind == "thinking":
        th = block.thinking
        if th.redacted:
            return {"type": "redacted_thinking", "data": th.data}
        return {"type": "thinking", "thinking": th.text, "signature": th.signature}
    if kind == "raw" and block.raw.provider == PROVIDER:
        return dict(cn.loads(block.raw.json))
    return None


def build_params(call: Call, default_max_tokens: int) -> dict[str, Any]:
    """Return the keyword arguments of `messages.create` for a call (no `stream`).

    Raises:
        ProviderError: INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for an output schema with an
            open object.
    """
    request, settings = call.request, call.request.settings
    system, messages = render(request)
    params: dict[str, Any] = {
        "model": call.model,
        "messages": messages,
        "max_tokens": settings.max_output_tokens
        if settings.HasField("max_output_tokens")
        else default_max_tokens,
    }
    if system:
        params["system"] = system
    if request.tools:
        params["tools"] = [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": cn.tool_schema(t),
                **({"strict": True} if t.strict else {}),
            }
            for t in request.tools
        ]
        choice = _tool_choice(settings.tool_choice, settings.disable_parallel_tool_calls)
        if choice is not None:
            params["tool_choice"] = choice
    if settings.output_json_schema:
        schema = caps.closed_output_schema(cn.loads(settings.output_json_schema))
        params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    extra = caps.sampling(settings, accepted=not caps.anthropic_rejects_sampling(call.model))
    if extra:
        params["extra_body"] = extra
    return params


def _tool_choice(choice: c.ToolChoice, single: bool) -> dict[str, Any] | None:
    mode = choice.mode
    if mode == c.TOOL_CHOICE_MODE_NONE:
        return {"type": "none"}
    if mode == c.TOOL_CHOICE_MODE_REQUIRED:
        out: dict[str, Any] = {"type": "any"}
    elif mode == c.TOOL_CHOICE_MODE_NAMED:
        out = {"type": "tool", "name": choice.name}
    elif mode == c.TOOL_CHOICE_MODE_AUTO or single:
        out = {"type": "auto"}
    else:
        return None
    if single:
        out["disable_parallel_tool_use"] = True
    return out


def map_message(data: dict[str, Any], sources: list[tuple[str, str]]) -> c.ModelResponse:
    """Map a Messages API message to the canonical response.

    Args:
        data: the parsed message.
        sources: per content block, (the block's exact JSON text, its `input` text or "").

    Raises:
        ProviderError: INVALID_ARGUMENT/CONTEXT_OVERFLOW for stop_reason
            model_context_window_exceeded (004 §2.5g).
    """
    if data.get("stop_reason") == _WINDOW_EXCEEDED:
        raise context_overflow(
            PROVIDER,
            "the response stopped at the model's context window (stop_reason "
            f"{_WINDOW_EXCEEDED}); compact the conversation",
            provider_code=_WINDOW_EXCEEDED,
        )
    resp = c.ModelResponse(
        response_id=data.get("id") or "", model=c.ModelRef(provider=PROVIDER, model=data.get("model") or "")
    )
    calls = 0
    for i, block in enumerate(data.get("content") or []):
        kind = block.get("type")
        source, input_text = sources[i] if i < len(sources) else (cn.dumps(block), "")
        if kind == "text":
            resp.content.append(cn.text_block(block.get("text") or ""))
        elif kind == "thinking":
            resp.content.append(
                c.ContentBlock(
                    thinking=c.ThinkingBlock(
                        text=block.get("thinking") or "", signature=block.get("signature") or ""
                    )
                )
            )
        elif kind == "redacted_thinking":
            resp.content.append(
                c.ContentBlock(thinking=c.ThinkingBlock(redacted=True, data=block.get("data") or ""))
            )
        elif kind == "tool_use":
            arguments = input_text or cn.dumps(block.get("input") or {})
            resp.content.append(
                cn.tool_call_block(calls, block.get("id") or "", block.get("name") or "", arguments)
            )
            calls += 1
        else:
            resp.content.append(cn.raw_block(PROVIDER, str(kind), source))
    stop = data.get("stop_reason") or ""
    resp.provider_stop_reason = stop
    resp.stop_reason = _STOPS.get(stop, c.STOP_REASON_TOOL_USE if calls else c.STOP_REASON_END_TURN)
    if resp.stop_reason == c.STOP_REASON_REFUSAL:
        resp.refusal = cn.joined_text(resp.content, "\n")
    u = data.get("usage") or {}
    cached = u.get("cache_read_input_tokens") or 0
    created = u.get("cache_creation_input_tokens") or 0
    # Anthropic's input_tokens excludes cache reads and writes; ours includes them.
    resp.usage.CopyFrom(
        cn.usage((u.get("input_tokens") or 0) + cached + created, u.get("output_tokens") or 0, cached)
    )
    return cn.finish(resp)


def map_body(body: str) -> c.ModelResponse:
    """Map a non-streaming response body, keeping each tool_use input's exact text."""
    return map_message(cn.clean(json.loads(body)), content_sources(body))


class _EventAccumulator:
    """Folds Messages stream events into one message and checks the stream is whole."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.parts: dict[int, list[str]] = {}
        self.open: set[int] = set()
        self.calls: dict[int, int] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason = ""
        self.done = False

    def add(self, event: dict[str, Any]) -> list[g.StreamGenerateResponse]:
        kind = event.get("type")
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
            self.usage.update(self.message.get("usage") or {})
        elif self.message is None:
            raise unavailable(PROVIDER, f"anthropic stream sent {kind} before message_start")
        elif kind == "content_block_start":
            index = event["index"]
            block = dict(event.get("content_block") or {})
            self.blocks[index], self.parts[index] = block, []
            self.open.add(index)
            if block.get("type") == "tool_use":
                self.calls[index] = len(self.calls)
                return [tool_delta(self.calls[index], block.get("name") or "", "")]
        elif kind == "content_block_delta":
            return self._delta(event["index"], event.get("delta") or {})
        elif kind == "content_block_stop":
            self.open.discard(event["index"])
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[g.StreamGenerateResponse]:
        if index not in self.open:
            raise unavailable(PROVIDER, f"anthropic stream sent a delta for block {index}, which is not open")
        block, kind = self.blocks[index], delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
            return [text_delta(delta.get("text", ""))]
        if kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            return [thinking_delta(delta.get("thinking", ""))]
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "input_json_delta":
            self.parts[index].append(delta.get("partial_json", ""))
            if index in self.calls:
                return [tool_delta(self.calls[index], "", delta.get("partial_json", ""))]
        return []

    def response(self) -> c.ModelResponse:
        if not self.done or self.message is None:
            raise unavailable(PROVIDER, "anthropic stream ended before message_stop")
        if self.open:
            raise unavailable(PROVIDER, f"anthropic stream left blocks {sorted(self.open)} open")
        if not self.stop_reason:
            raise unavailable(PROVIDER, "anthropic stream reported no stop_reason")
        blocks, sources = [], []
        for index in sorted(self.blocks):
            block, joined = self.blocks[index], "".join(self.parts[index])
            if joined and block.get("type") != "tool_use":
                block["input"] = cn.loads(joined)
            if block.get("type") == "tool_use" and not joined:
                joined = cn.dumps(block.get("input") or {})
            blocks.append(block)
            sources.append((cn.dumps(block), joined))
        data = {**self.message, "content": blocks, "stop_reason": self.stop_reason, "usage": self.usage}
        return map_message(data, sources)


class AnthropicMessagesProvider:
    """The "anthropic" provider (see the module docstring)."""

    name = PROVIDER
    streams = True
    counts_tokens = True

    def __init__(self, settings: ProviderSettings, default_max_tokens: int = 4096) -> None:
        """Create the SDK client; SDK retries are off (the gateway retries with deadlines)."""
        self.default_model = settings.default_model
        self._max_tokens = default_max_tokens
        self._client = anthropic.AsyncAnthropic(
            api_key=settings.api_key, base_url=settings.base_url, max_retries=0
        )

    def model_id(self, requested: str) -> str:
        """See Provider.model_id: any name goes to the provider; "" is the default model."""
        return requested or self.default_model

    async def generate(self, call: Call) -> c.ModelResponse:
        """See Provider.generate."""
        params = build_params(call, self._max_tokens)
        try:
            raw = await self._client.messages.with_raw_response.create(
                **sdk_kwargs(params, _KEEP, _REQUIRED), timeout=call.timeout_seconds
            )
            body = await raw.text()
            return map_body(body)
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc

    async def stream(self, call: Call) -> AsyncIterator[StreamItem]:
        """See Provider.stream."""
        params = build_params(call, self._max_tokens)
        acc = _EventAccumulator()
        try:
            raw = await self._client.messages.with_raw_response.create(
                **sdk_kwargs(params, _KEEP, _REQUIRED), stream=True, timeout=call.timeout_seconds
            )
            # Events as the JSON the SDK decoded, not typed models: the SDK's per-event
            # construction validates against its whole event union (see openai_responses).
            events = await raw.parse(to=anthropic.AsyncStream[object])
            async with events:
                async for event in events:
                    for delta in acc.add(cn.clean(event) if isinstance(event, dict) else {}):
                        yield delta
            final = acc.response()
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        yield final

    async def count_tokens(self, call: Call) -> TokenCount:
        """Count with Anthropic's count_tokens endpoint: PROVIDER_ESTIMATE."""
        params = build_params(call, self._max_tokens)
        keep = ("model", "messages", "system", "tools", "tool_choice")
        try:
            counted = await self._client.messages.count_tokens(
                **sdk_kwargs({k: v for k, v in params.items() if k in keep}, _KEEP, _REQUIRED),
                timeout=call.timeout_seconds,
            )
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        return TokenCount(int(counted.input_tokens), g.TOKEN_COUNT_KIND_PROVIDER_ESTIMATE)

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
