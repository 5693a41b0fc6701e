"""The OpenAI Responses API adapter (official `openai` SDK; seed 002 "Provider Adapters").

History rendering: user text and images become `message` items; an assistant's tool_use
becomes a `function_call` item and its tool_result a `function_call_output` item joined by
`call_id`; raw OpenAI items (reasoning with encrypted content) are replayed verbatim.
Requests are sent with `store: false`: the adapter is stateless and every request carries
the whole transcript.

Response mapping: `output_text` parts -> text, `function_call` items -> tool_use with the
`arguments` string exactly as sent, `refusal` parts -> `refusal`, anything else -> raw.
Stop reason: status "incomplete" with max_output_tokens -> MAX_TOKENS, content_filter ->
REFUSAL (any other incomplete reason fails the call), a refusal -> REFUSAL, function calls
-> TOOL_USE, else END_TURN. "failed" responses and stream error events are classified like
HTTP errors. Tools and structured output cannot be combined (seed 002 "Provider Capability
Differences"): INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY. Structured output is sent strict,
its schema projected by capabilities.py; reasoning models get no sampling parameters and
are asked for encrypted reasoning, which the raw reasoning blocks carry for replay.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai

from agentrt.gateway import capabilities as caps
from agentrt.gateway.config import ProviderSettings
from agentrt.gateway.errors import classify, from_error_body, unavailable
from agentrt.gateway.providers import canonical as cn
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

PROVIDER = "openai"
_TERMINAL = ("response.completed", "response.incomplete")
#: The SDK's stream yielding each event's decoded JSON untouched (cast to `object` is the
#: identity; see OpenAIResponsesProvider.stream).
_JsonEvents = openai.AsyncStream[object]


def _field(event: dict[str, Any], name: str) -> dict[str, Any]:
    value = event.get(name)
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> Any:
    """A delta's string with lone surrogates replaced (canonical.clean of one value); "" for none."""
    return cn.clean(value) if value else ""


def render_input(request: g.ModelRequest) -> list[dict[str, Any]]:
    """Render the conversation as Responses API input items, in order."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == c.ROLE_SYSTEM:
            text = cn.joined_text(message.content)
            if text:
                items.append({"role": "system", "content": text})
        elif message.role == c.ROLE_USER:
            _render_user(message.content, items)
        else:
            _render_assistant(message.content, items)
    return items


def _render_user(blocks: Any, items: list[dict[str, Any]]) -> None:
    parts: list[dict[str, Any]] = []

    def flush() -> None:
        if parts:
            items.append({"role": "user", "content": list(parts)})
            parts.clear()

    for block in blocks:
        kind = block.WhichOneof("block")
        if kind == "text":
            parts.append({"type": "input_text", "text": block.text.text})
        elif kind == "image":
            parts.append(
                {"type": "input_image", "image_url": cn.image_data_url(block.image), "detail": "auto"}
            )
        elif kind == "tool_result":
            flush()
            result = block.tool_result
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": cn.safe_id(result.call_id),
                    "output": result.content,
                }
            )
        elif kind == "raw" and block.raw.provider == PROVIDER:
            flush()
            items.append(cn.loads(block.raw.json))
    flush()


def _render_assistant(blocks: Any, items: list[dict[str, Any]]) -> None:
    for block in blocks:
        kind = block.WhichOneof("block")
        if kind == "text" and block.text.text:
            items.append({"type": "message", "role": "assistant", "content": block.text.text})
        elif kind == "tool_use":
            call = block.tool_use
            items.append(
                {
                    "type": "function_call",
                    "call_id": cn.safe_id(call.call_id),
                    "name": call.name,
                    "arguments": cn.render_args(call),
                }
            )
        elif kind == "raw" and block.raw.provider == PROVIDER:
            item = cn.loads(block.raw.json)
            # With store=false a reasoning item can only be replayed with its encrypted content.
            if item.get("type") != "reasoning" or item.get("encrypted_content"):
                items.append(item)


def build_params(call: Call) -> dict[str, Any]:
    """Return the keyword arguments of `responses.create` for a call (no `stream`).

    Raises:
        ProviderError: INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for tools with structured output,
            or an output schema outside OpenAI's strict subset (capabilities.py).
    """
    request, settings = call.request, call.request.settings
    params: dict[str, Any] = {"model": call.model, "input": render_input(request), "store": False}
    if request.system:
        params["instructions"] = request.system
    if request.tools:
        if settings.output_json_schema:
            raise caps.unsupported("OpenAI cannot combine tools with structured output")
        params["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": cn.tool_schema(t),
                "strict": t.strict,
            }
            for t in request.tools
        ]
        choice = _tool_choice(settings.tool_choice)
        if choice is not None:
            params["tool_choice"] = choice
        if settings.disable_parallel_tool_calls:
            params["parallel_tool_calls"] = False
    if settings.output_json_schema:
        params["text"] = {
            "format": {
                "type": "json_schema",
                "name": "output",
                "schema": caps.strict_output_schema(cn.loads(settings.output_json_schema)),
                "strict": True,
            }
        }
    if settings.HasField("max_output_tokens"):
        params["max_output_tokens"] = settings.max_output_tokens
    reasoning = caps.openai_reasoning_model(call.model)
    if reasoning:
        # store=false keeps no reasoning server-side: ask for it encrypted, to replay it.
        params["include"] = ["reasoning.encrypted_content"]
    params.update(caps.sampling(settings, accepted=not reasoning))
    return params


def _tool_choice(choice: c.ToolChoice) -> Any:
    if choice.mode == c.TOOL_CHOICE_MODE_AUTO:
        return "auto"
    if choice.mode == c.TOOL_CHOICE_MODE_NONE:
        return "none"
    if choice.mode == c.TOOL_CHOICE_MODE_REQUIRED:
        return "required"
    if choice.mode == c.TOOL_CHOICE_MODE_NAMED:
        return {"type": "function", "name": choice.name}
    return None


def map_response(data: dict[str, Any]) -> c.ModelResponse:
    """Map a Responses API response object (parsed JSON) to the canonical response.

    Raises:
        ProviderError: a "failed" response, or one incomplete for a reason other than the
            output cap or the content filter.
    """
    status = data.get("status") or "completed"
    if status == "failed":
        raise from_error_body(PROVIDER, data.get("error"))
    resp = c.ModelResponse(
        response_id=data.get("id") or "", model=c.ModelRef(provider=PROVIDER, model=data.get("model") or "")
    )
    refusals: list[str] = []
    calls = 0
    for item in data.get("output") or []:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    resp.content.append(cn.text_block(part.get("text") or ""))
                elif part.get("type") == "refusal":
                    refusals.append(part.get("refusal") or "")
                else:
                    resp.content.append(cn.raw_block(PROVIDER, str(part.get("type")), cn.dumps(part)))
        elif kind == "function_call":
            provider_id = item.get("call_id") or item.get("id") or ""
            resp.content.append(
                cn.tool_call_block(calls, provider_id, item.get("name") or "", item.get("arguments") or "")
            )
            calls += 1
        else:
            resp.content.append(cn.raw_block(PROVIDER, str(kind), cn.dumps(item)))
    reason = (data.get("incomplete_details") or {}).get("reason") or ""
    resp.provider_stop_reason = f"{status}:{reason}" if reason else status
    if status == "incomplete":
        if reason == "max_output_tokens":
            resp.stop_reason = c.STOP_REASON_MAX_TOKENS
        elif reason == "content_filter":
            resp.stop_reason = c.STOP_REASON_REFUSAL
        else:
            raise unavailable(
                PROVIDER, f"openai response incomplete: {reason or 'unknown reason'}", retryable=False
            )
    elif refusals:
        resp.stop_reason = c.STOP_REASON_REFUSAL
    elif calls:
        resp.stop_reason = c.STOP_REASON_TOOL_USE
    else:
        resp.stop_reason = c.STOP_REASON_END_TURN
    if refusals:
        resp.refusal = "\n".join(refusals)
    u = data.get("usage") or {}
    resp.usage.CopyFrom(
        cn.usage(
            u.get("input_tokens") or 0,
            u.get("output_tokens") or 0,
            (u.get("input_tokens_details") or {}).get("cached_tokens") or 0,
            (u.get("output_tokens_details") or {}).get("reasoning_tokens") or 0,
        )
    )
    return cn.finish(resp)


class OpenAIResponsesProvider:
    """The "openai" provider (see the module docstring)."""

    name = PROVIDER
    streams = True

    def __init__(self, settings: ProviderSettings) -> None:
        """Create the SDK client; SDK retries are off (the gateway retries with deadlines)."""
        self.default_model = settings.default_model
        self._client = openai.AsyncOpenAI(api_key=settings.api_key, base_url=settings.base_url, max_retries=0)
        self.counts_tokens = hasattr(self._client.responses, "input_tokens")

    def model_id(self, requested: str) -> str:
        """See Provider.model_id: any name goes to the provider; "" is the default model."""
        return requested or self.default_model

    async def generate(self, call: Call) -> c.ModelResponse:
        """See Provider.generate."""
        params = build_params(call)
        try:
            raw = await self._client.responses.with_raw_response.create(
                **sdk_kwargs(params), timeout=call.timeout_seconds
            )
            data = cn.clean(json.loads(raw.text))
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        return map_response(data)

    async def stream(self, call: Call) -> AsyncIterator[StreamItem]:
        """See Provider.stream.

        Events are read as the JSON objects the SDK decoded from the SSE stream, not as
        typed models: the SDK's per-event model construction (a validation against its
        whole event union) was the largest single cost of a streamed call, and the
        adapter maps plain JSON anyway. The SDK still makes the call, decodes the stream
        and raises its error classes (HTTP errors, `error` data events). The final response
        is yielded once the body has been read to its end.
        """
        params = build_params(call)
        calls: dict[int, int] = {}
        final: c.ModelResponse | None = None
        try:
            raw = await self._client.responses.with_raw_response.create(
                **sdk_kwargs(params), stream=True, timeout=call.timeout_seconds
            )
            events = raw.parse(to=_JsonEvents)
            async with events:
                async for event in events:
                    if final is not None or not isinstance(event, dict):
                        continue  # read to the end: a fully read response keeps its connection
                    # Only what is used is scrubbed (canonical.clean): the lifecycle events
                    # (created, in_progress, the *.done ones) carry the whole response, unused.
                    kind = event.get("type")
                    if kind == "response.output_text.delta":
                        yield text_delta(_text(event.get("delta")))
                    elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                        yield thinking_delta(_text(event.get("delta")))
                    elif kind == "response.output_item.added":
                        item = _field(event, "item")
                        if item.get("type") == "function_call":
                            index = event.get("output_index", 0)
                            calls[index] = len(calls)
                            yield tool_delta(
                                calls[index], _text(item.get("name")), _text(item.get("arguments"))
                            )
                    elif kind == "response.function_call_arguments.delta":
                        yield tool_delta(
                            calls.get(event.get("output_index", 0), 0), "", _text(event.get("delta"))
                        )
                    elif kind in _TERMINAL:
                        final = map_response(cn.clean(_field(event, "response")))
                    elif kind == "response.failed":
                        raise from_error_body(PROVIDER, cn.clean(_field(event, "response").get("error")))
                    elif kind == "error":
                        raise from_error_body(PROVIDER, cn.clean(event))
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        if final is None:
            raise unavailable(PROVIDER, "openai stream ended before response.completed")
        # Yielded after the body is read: closing the stream at the final (the gateway does)
        # would otherwise drop the HTTP connection instead of returning it to the pool.
        yield final

    async def count_tokens(self, call: Call) -> TokenCount:
        """Count with the Responses input-token endpoint: EXACT."""
        params = build_params(call)
        keep = ("model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text")
        try:
            counted = await self._client.responses.input_tokens.count(
                **sdk_kwargs({k: v for k, v in params.items() if k in keep}),
                timeout=call.timeout_seconds,
            )
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        return TokenCount(int(counted.input_tokens), g.TOKEN_COUNT_KIND_EXACT)

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
