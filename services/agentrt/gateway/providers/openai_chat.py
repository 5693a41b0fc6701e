"""The Chat Completions adapter, for OpenAI-compatible servers (official `openai` SDK).

History rendering: system text first; user text and images as a user message; each
tool_result as a `role: tool` message with its `tool_call_id`, placed before the user's
other content so it directly follows the assistant message that asked for it; an
assistant turn as one message with `content` and `tool_calls` (arguments replayed exactly).

Response mapping: `message.content` -> text, `reasoning_content` (served by several
compatible servers) -> thinking, `tool_calls` -> tool_use with `function.arguments` exactly
as sent, `refusal` -> refusal. finish_reason: "tool_calls" -> TOOL_USE, "length" ->
MAX_TOKENS, "content_filter" or a refusal -> REFUSAL, else END_TURN. Streams accumulate
the chunks' fragments, a tool call's per call id when the fragments carry ids (servers
that number parallel calls all 0 stay apart) and per index otherwise; a stream that ends
without a finish_reason is an error. Chat Completions
has no token counter: CountTokens answers FAILED_PRECONDITION/TOKEN_COUNTING_UNSUPPORTED.
OpenAI reasoning models (capabilities.py) get `max_completion_tokens` and no sampling
parameters; structured output is sent as `response_format` json_schema, not strict, since
compatible servers differ in what strict means.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai

from agentrt.core.errors import Reason, precondition
from agentrt.gateway import capabilities as caps
from agentrt.gateway.config import ProviderSettings
from agentrt.gateway.errors import classify, unavailable
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

PROVIDER = "openai-chat"
#: The SDK requires `messages` and `model`; their values ride in extra_body (provider.sdk_kwargs).
_REQUIRED: dict[str, Any] = {"messages": openai.omit, "model": openai.omit}


def render_messages(request: g.ModelRequest) -> list[dict[str, Any]]:
    """Render system text and the conversation as Chat Completions messages, in order."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == c.ROLE_SYSTEM:
            text = cn.joined_text(message.content)
            if text:
                out.append({"role": "system", "content": text})
        elif message.role == c.ROLE_USER:
            _render_user(message.content, out)
        else:
            _render_assistant(message.content, out)
    return out


def _render_user(blocks: Any, out: list[dict[str, Any]]) -> None:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.WhichOneof("block")
        if kind == "tool_result":
            result = block.tool_result
            out.append(
                {"role": "tool", "tool_call_id": cn.safe_id(result.call_id), "content": result.content}
            )
        elif kind == "text":
            parts.append({"type": "text", "text": block.text.text})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": cn.image_data_url(block.image)}})
    if len(parts) == 1 and parts[0]["type"] == "text":
        # A plain string is what every compatible server accepts.
        out.append({"role": "user", "content": parts[0]["text"]})
    elif parts:
        out.append({"role": "user", "content": parts})


def _render_assistant(blocks: Any, out: list[dict[str, Any]]) -> None:
    text = cn.joined_text(blocks)
    calls = [
        {
            "id": cn.safe_id(b.tool_use.call_id),
            "type": "function",
            "function": {"name": b.tool_use.name, "arguments": cn.render_args(b.tool_use)},
        }
        for b in blocks
        if b.WhichOneof("block") == "tool_use"
    ]
    if not text and not calls:
        return
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    out.append(message)


def build_params(call: Call) -> dict[str, Any]:
    """Return the keyword arguments of `chat.completions.create` for a call (no `stream`)."""
    request, settings = call.request, call.request.settings
    params: dict[str, Any] = {"model": call.model, "messages": render_messages(request)}
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": cn.tool_schema(t),
                    **({"strict": True} if t.strict else {}),
                },
            }
            for t in request.tools
        ]
        choice = _tool_choice(settings.tool_choice)
        if choice is not None:
            params["tool_choice"] = choice
        # Only sent when asked: several compatible servers reject the field.
        if settings.disable_parallel_tool_calls:
            params["parallel_tool_calls"] = False
    if settings.output_json_schema:
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": cn.loads(settings.output_json_schema)},
        }
    reasoning = caps.openai_reasoning_model(call.model)
    if settings.HasField("max_output_tokens"):
        # max_tokens is the field compatible servers know; OpenAI's reasoning models refuse it.
        params["max_completion_tokens" if reasoning else "max_tokens"] = settings.max_output_tokens
    params.update(caps.sampling(settings, accepted=not reasoning))
    if settings.HasField("seed"):
        params["seed"] = settings.seed
    return params


def _tool_choice(choice: c.ToolChoice) -> Any:
    if choice.mode == c.TOOL_CHOICE_MODE_AUTO:
        return "auto"
    if choice.mode == c.TOOL_CHOICE_MODE_NONE:
        return "none"
    if choice.mode == c.TOOL_CHOICE_MODE_REQUIRED:
        return "required"
    if choice.mode == c.TOOL_CHOICE_MODE_NAMED:
        return {"type": "function", "function": {"name": choice.name}}
    return None


def map_completion(data: dict[str, Any]) -> c.ModelResponse:
    """Map a chat.completion object (parsed JSON) to the canonical response.

    Raises:
        ProviderError: UNAVAILABLE/PROVIDER_UNAVAILABLE when it has no choice.
    """
    choices = data.get("choices") or []
    if not choices:
        raise unavailable(PROVIDER, "chat completion has no choices", retryable=False)
    choice = choices[0]
    message = choice.get("message") or {}
    calls = [
        (
            tc.get("id") or "",
            (tc.get("function") or {}).get("name") or "",
            (tc.get("function") or {}).get("arguments"),
        )
        for tc in message.get("tool_calls") or []
    ]
    return _assemble(
        data,
        thinking=message.get("reasoning_content") or "",
        text=message.get("content") or "",
        calls=[(i, n, a or "") for i, n, a in calls],
        refusal=message.get("refusal") or "",
        finish=choice.get("finish_reason") or "",
        usage=data.get("usage") or {},
    )


def _assemble(
    data: dict[str, Any],
    *,
    thinking: str,
    text: str,
    calls: list[tuple[str, str, str]],
    refusal: str,
    finish: str,
    usage: dict[str, Any],
) -> c.ModelResponse:
    resp = c.ModelResponse(
        response_id=data.get("id") or "", model=c.ModelRef(provider=PROVIDER, model=data.get("model") or "")
    )
    if thinking:
        resp.content.append(c.ContentBlock(thinking=c.ThinkingBlock(text=thinking)))
    if text:
        resp.content.append(cn.text_block(text))
    for index, (provider_id, name, arguments) in enumerate(calls):
        resp.content.append(cn.tool_call_block(index, provider_id, name, arguments))
    resp.provider_stop_reason = finish
    if finish == "length":
        resp.stop_reason = c.STOP_REASON_MAX_TOKENS
    elif finish == "content_filter" or refusal:
        resp.stop_reason = c.STOP_REASON_REFUSAL
        resp.refusal = refusal
    elif calls:
        # Some servers answer "stop" even when they returned calls.
        resp.stop_reason = c.STOP_REASON_TOOL_USE
    else:
        resp.stop_reason = c.STOP_REASON_END_TURN
    resp.usage.CopyFrom(
        cn.usage(
            usage.get("prompt_tokens") or 0,
            usage.get("completion_tokens") or 0,
            (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
            (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0,
        )
    )
    return cn.finish(resp)


class _ChunkAccumulator:
    """Folds streamed chunks into the pieces of one completion."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.refusal: list[str] = []
        #: the calls in the order they opened: [id, name, arguments]
        self.calls: list[list[str]] = []
        #: which call a fragment continues: by its id when it has one, else by its index
        self._by_id: dict[str, int] = {}
        self._by_index: dict[int, int] = {}
        self.finish = ""
        self.usage: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> list[g.StreamGenerateResponse]:
        deltas: list[g.StreamGenerateResponse] = []
        self.meta.setdefault("id", chunk.get("id"))
        self.meta.setdefault("model", chunk.get("model"))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                self.thinking.append(delta["reasoning_content"])
                deltas.append(thinking_delta(delta["reasoning_content"]))
            if delta.get("content"):
                self.text.append(delta["content"])
                deltas.append(text_delta(delta["content"]))
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
            for tc in delta.get("tool_calls") or []:
                deltas.append(self._add_call(tc))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return deltas

    def _add_call(self, tc: dict[str, Any]) -> g.StreamGenerateResponse:
        """Fold one tool-call fragment; return its delta (the call's position, name on its first).

        A fragment carrying an id belongs to the call with that id, a new one when the id is
        new, whatever its index (compatible servers number parallel calls 0, 0, ...);
        one without an id continues the call last opened at its index, or opens one.
        """
        index = tc.get("index")
        index = index if isinstance(index, int) else len(self.calls)
        call_id = tc.get("id") or ""
        fn = tc.get("function") or {}
        position = self._by_id.get(call_id) if call_id else self._by_index.get(index)
        first = position is None
        if position is None:
            position = len(self.calls)
            self.calls.append([call_id, "", ""])
            if call_id:
                self._by_id[call_id] = position
        self._by_index[index] = position
        slot = self.calls[position]
        slot[1] = slot[1] or fn.get("name") or ""
        fragment = fn.get("arguments") or ""
        slot[2] += fragment
        return tool_delta(position, slot[1] if first else "", fragment)

    def response(self) -> c.ModelResponse:
        return _assemble(
            self.meta,
            thinking="".join(self.thinking),
            text="".join(self.text),
            calls=[(s[0], s[1], s[2]) for s in self.calls],
            refusal="".join(self.refusal),
            finish=self.finish,
            usage=self.usage,
        )


class OpenAIChatProvider:
    """The "openai-chat" provider (see the module docstring)."""

    name = PROVIDER
    streams = True
    counts_tokens = False

    def __init__(self, settings: ProviderSettings) -> None:
        """Create the SDK client; SDK retries are off (the gateway retries with deadlines)."""
        self.default_model = settings.default_model
        self._client = openai.AsyncOpenAI(api_key=settings.api_key, base_url=settings.base_url, max_retries=0)

    def model_id(self, requested: str) -> str:
        """See Provider.model_id: any name goes to the provider; "" is the default model."""
        return requested or self.default_model

    async def generate(self, call: Call) -> c.ModelResponse:
        """See Provider.generate."""
        params = build_params(call)
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **sdk_kwargs(params, required=_REQUIRED), timeout=call.timeout_seconds
            )
            data = cn.clean(json.loads(raw.text))
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        return map_completion(data)

    async def stream(self, call: Call) -> AsyncIterator[StreamItem]:
        """See Provider.stream."""
        params = build_params(call)
        params["stream_options"] = {"include_usage": True}
        acc = _ChunkAccumulator()
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **sdk_kwargs(params, required=_REQUIRED), stream=True, timeout=call.timeout_seconds
            )
            # Chunks as the JSON the SDK decoded, not typed models (see openai_responses).
            chunks = raw.parse(to=openai.AsyncStream[object])
            async with chunks:
                async for chunk in chunks:
                    for delta in acc.add(cn.clean(chunk) if isinstance(chunk, dict) else {}):
                        yield delta
        except Exception as exc:  # noqa: BLE001 - every SDK failure is classified
            raise classify(exc, PROVIDER) from exc
        if not acc.finish:
            raise unavailable(PROVIDER, "chat completion stream ended without a finish_reason")
        yield acc.response()

    async def count_tokens(self, call: Call) -> TokenCount:
        """Chat Completions cannot count tokens.

        Raises:
            MeshError: FAILED_PRECONDITION/TOKEN_COUNTING_UNSUPPORTED, always.
        """
        raise precondition(
            Reason.TOKEN_COUNTING_UNSUPPORTED,
            "Chat Completions servers offer no token counting",
            provider=PROVIDER,
        )

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
