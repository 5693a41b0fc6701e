"""Response bodies and SSE event lists of the emulated providers (see providers.py).

Each builder turns a scripted Reply into what the real API sends: JSON objects for plain
calls, and lists of (event name, data) for streams, with the fields the official SDKs read.
A reply with `stream_cut` loses its terminal events.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.emulators.providers import Reply

Events = list[tuple[str | None, str]]


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _response_id(reply: Reply, default: str) -> str:
    return reply.response_id if reply.response_id is not None else default


def _call_id(prefix: str, n: int, i: int, given: str | None) -> str:
    return given or f"{prefix}{hashlib.sha1(f'{n}:{i}'.encode()).hexdigest()[:16]}"


# ---------------------------------------------------------------- OpenAI Responses


def _responses_items(reply: Reply, n: int, *, final: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    done = "completed" if final else "in_progress"
    if reply.thinking:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": reply.thinking}],
                **({"encrypted_content": reply.encrypted_reasoning} if reply.encrypted_reasoning else {}),
            }
        )
    if reply.stop_reason == "refusal":
        items.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "status": done,
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": reply.text}],
            }
        )
    elif reply.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "status": done,
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}],
            }
        )
    cut = reply.stop_reason == "max_tokens"
    for i, tc in enumerate(reply.tool_calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": _call_id("call_", n, i, tc.id),
                "name": tc.name,
                "arguments": tc.arguments,
                "status": "incomplete" if cut else done,
            }
        )
    return items


def responses_object(reply: Reply, model: str, n: int, *, status: str | None = None) -> dict[str, Any]:
    """Return the Responses API response object for a reply."""
    incomplete = reply.stop_reason == "max_tokens"
    return {
        "id": _response_id(reply, f"resp_{n}"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status or ("incomplete" if incomplete else "completed"),
        "model": model,
        "output": _responses_items(reply, n, final=True) if status != "in_progress" else [],
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def responses_events(reply: Reply, model: str, n: int) -> Events:
    """Return the SSE events of a streamed Responses API call."""
    out: list[dict[str, Any]] = []
    out.append(
        {"type": "response.created", "response": responses_object(reply, model, n, status="in_progress")}
    )
    out.append(
        {"type": "response.in_progress", "response": responses_object(reply, model, n, status="in_progress")}
    )
    for index, item in enumerate(_responses_items(reply, n, final=True)):
        kind = item["type"]
        if kind == "reasoning":
            out.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "summary": []}}
            )
            for piece in _chunks(reply.thinking, reply.chunk_chars):
                out.append(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": 0,
                        "delta": piece,
                    }
                )
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
        elif kind == "message":
            part = item["content"][0]
            refusal = part["type"] == "refusal"
            empty = (
                {"type": "refusal", "refusal": ""}
                if refusal
                else {"type": "output_text", "text": "", "annotations": []}
            )
            base = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            out.append({"type": "response.content_part.added", **base, "part": empty})
            for piece in _chunks(reply.text, reply.chunk_chars):
                if refusal:
                    out.append({"type": "response.refusal.delta", **base, "delta": piece})
                else:
                    out.append({"type": "response.output_text.delta", **base, "delta": piece, "logprobs": []})
            if refusal:
                out.append({"type": "response.refusal.done", **base, "refusal": reply.text})
            else:
                out.append({"type": "response.output_text.done", **base, "text": reply.text, "logprobs": []})
            out.append({"type": "response.content_part.done", **base, "part": part})
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
        else:
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            for piece in _chunks(item["arguments"], reply.chunk_chars):
                out.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": piece,
                    }
                )
            out.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": index,
                    "arguments": item["arguments"],
                    "name": item["name"],
                }
            )
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = responses_object(reply, model, n)
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    if not reply.stream_cut:
        out.append({"type": terminal, "response": final})
    events: Events = []
    for seq, event in enumerate(out):
        event["sequence_number"] = seq
        events.append((event["type"], json.dumps(event)))
    return events


# ---------------------------------------------------------------- Chat Completions


def _finish(reply: Reply) -> str:
    stop = reply.stop_reason
    if stop == "max_tokens":
        return "length"
    if stop == "tool_use" and reply.tool_calls:
        return "tool_calls"
    return "stop"


def _chat_usage(reply: Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
    }


def chat_object(reply: Reply, model: str, n: int) -> dict[str, Any]:
    """Return the chat.completion object for a reply."""
    refusal = reply.stop_reason == "refusal"
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if refusal or not reply.text else reply.text,
        "refusal": reply.text if refusal else None,
    }
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id("call_", n, i, tc.id),
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments},
            }
            for i, tc in enumerate(reply.tool_calls)
        ]
    return {
        "id": _response_id(reply, f"chatcmpl-{n}"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply), "logprobs": None}],
        "usage": _chat_usage(reply),
    }


def chat_chunks(reply: Reply, model: str, n: int, include_usage: bool) -> Events:
    """Return the SSE data lines of a streamed chat completion, ending with [DONE]."""
    base = {
        "id": _response_id(reply, f"chatcmpl-{n}"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    lines = [chunk({"role": "assistant", "content": ""})]
    for piece in _chunks(reply.thinking, reply.chunk_chars) if reply.thinking else []:
        lines.append(chunk({"reasoning_content": piece}))
    key = "refusal" if reply.stop_reason == "refusal" else "content"
    for piece in _chunks(reply.text, reply.chunk_chars) if reply.text else []:
        lines.append(chunk({key: piece}))
    for i, tc in enumerate(reply.tool_calls):
        index = 0 if reply.tool_index_zero else i
        lines.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": _call_id("call_", n, i, tc.id),
                            "type": "function",
                            "function": {"name": tc.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _chunks(tc.arguments, reply.chunk_chars) if tc.arguments else []:
            lines.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    if not reply.stream_cut:
        lines.append(chunk({}, _finish(reply)))
        if include_usage:
            lines.append(json.dumps({**base, "choices": [], "usage": _chat_usage(reply)}))
        lines.append("[DONE]")
    return [(None, line) for line in lines]


# ---------------------------------------------------------------- Anthropic Messages

_ANTHROPIC_STOPS = {"context_window": "model_context_window_exceeded"}


def _anthropic_blocks(reply: Reply, n: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking:
        sig = hashlib.sha256(reply.thinking.encode()).hexdigest()
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": f"sig_{sig}"})
    if reply.redacted_thinking:
        blocks.append({"type": "redacted_thinking", "data": reply.redacted_thinking})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for i, tc in enumerate(reply.tool_calls):
        blocks.append(
            {"type": "tool_use", "id": _call_id("toolu_", n, i, tc.id), "name": tc.name, "input": {}}
        )
    return blocks


def _anthropic_usage(reply: Reply, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": reply.input_tokens - reply.cached_tokens,
        "cache_read_input_tokens": reply.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def anthropic_body(reply: Reply, model: str, n: int) -> str:
    """Return the Messages API JSON body, with each tool call's arguments embedded byte for byte."""
    blocks = _anthropic_blocks(reply, n)
    calls = iter(reply.tool_calls)
    raw: dict[str, str] = {}
    for i, block in enumerate(blocks):
        if block["type"] == "tool_use":
            marker = f"@@ARGS_{i}@@"
            args = next(calls).arguments
            raw[json.dumps(marker)] = args if _is_json_object(args) else "{}"
            block["input"] = marker
    message = {
        "id": _response_id(reply, f"msg_{n}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": _ANTHROPIC_STOPS.get(reply.stop_reason, reply.stop_reason),
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, reply.output_tokens),
    }
    text = json.dumps(message)
    for marker, args in raw.items():
        text = text.replace(marker, args, 1)
    return text


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def anthropic_events(reply: Reply, model: str, n: int) -> Events:
    """Return the SSE events of a streamed Messages API call."""
    out: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": _response_id(reply, f"msg_{n}"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": _anthropic_usage(reply, 1),
            },
        }
    ]
    calls = iter(reply.tool_calls)
    blocks = _anthropic_blocks(reply, n)
    for index, block in enumerate(blocks):
        kind = block["type"]
        start = {**block, "text": ""} if kind == "text" else dict(block)
        if kind == "thinking":
            start.update(thinking="", signature="")
        out.append({"type": "content_block_start", "index": index, "content_block": start})
        if index == 0:
            out.append({"type": "ping"})
        if kind == "text":
            for piece in _chunks(reply.text, reply.chunk_chars):
                out.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
        elif kind == "redacted_thinking":
            pass  # sent whole in content_block_start
        elif kind == "thinking":
            for piece in _chunks(reply.thinking, reply.chunk_chars):
                out.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                )
            out.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": block["signature"]},
                }
            )
        else:
            args = next(calls).arguments
            for piece in _chunks(args, reply.chunk_chars) if args else []:
                out.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        if reply.stream_cut and index == len(blocks) - 1:
            break
        out.append({"type": "content_block_stop", "index": index})
    if not reply.stream_cut:
        out.append(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": _ANTHROPIC_STOPS.get(reply.stop_reason, reply.stop_reason),
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": reply.output_tokens},
            }
        )
        out.append({"type": "message_stop"})
    return [(event["type"], json.dumps(event)) for event in out]


# ---------------------------------------------------------------- in-stream errors


def with_stream_error(events: Events, path: str, kind: str) -> Events:
    """Return the first half of events, then the provider's in-stream error event for kind."""
    from tests.emulators.providers import _ANTHROPIC_ERRORS, _OPENAI_ERRORS

    head = events[: max(1, len(events) // 2)]
    if path == "/v1/messages":
        etype, message = _ANTHROPIC_ERRORS.get(kind, _ANTHROPIC_ERRORS["server_error"])
        error = {"type": "error", "error": {"type": etype, "message": message}}
        return [*head, ("error", json.dumps(error))]
    etype, code, text = _OPENAI_ERRORS.get(kind, _OPENAI_ERRORS["server_error"])
    if path == "/v1/responses":
        event = {"type": "error", "code": code or etype, "message": text, "param": None}
        return [*head, ("error", json.dumps({**event, "sequence_number": len(head)}))]
    # Chat Completions servers send an error object as a data line.
    return [*head, (None, json.dumps({"error": {"message": text, "type": etype, "code": code}}))]
