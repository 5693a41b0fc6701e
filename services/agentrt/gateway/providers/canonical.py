"""Building blocks every adapter shares: canonical blocks, exact tool calls, ids, finishing.

Invariants kept here for all providers:
- A tool call's arguments are the exact string the provider sent. When it is not JSON it
  travels out of band in `invalid_arguments` (seed 000 "Arguments that were not JSON"); JSON
  is read strictly (`core.jsontext`: a non-finite number is not JSON).
- A response cut at the token cap, refused, or stopped by the context window carries no
  tool_use block: a half-written call must never reach a tool (seed 000 "No partial tool
  call ever executes"; 004 §2.7e). `finish()` enforces it for every adapter.
- Tool-call ids rendered back to a provider satisfy its id pattern; the mapping is a pure
  function of the runtime's call id, so a tool_use and its tool_result always agree.
- Nothing that is not Unicode crosses in either direction (issue 10 "Bad bytes"): what an
  adapter parses from a provider goes through `clean` (a lone UTF-16 surrogate becomes
  U+FFFD) and every argument or raw JSON text through `core.text.scrub_json` before it is
  put in a message; JSON the request builders decode from a stored conversation goes
  through `loads`, so a session that already holds such an escape can still be sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from agentrt.core import jsontext
from agentrt.core.text import scrub, scrub_json, scrubbed
from agentrt.v1 import common_pb2 as c

#: Stop reasons whose tool calls are dropped.
_UNSAFE_STOPS = (c.STOP_REASON_MAX_TOKENS, c.STOP_REASON_REFUSAL, c.STOP_REASON_CONTEXT_WINDOW_EXCEEDED)
_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")
_ID_MAX = 64


def clean(value: Any) -> Any:
    """Return parsed provider JSON with every lone surrogate replaced by U+FFFD (see module docstring)."""
    return scrubbed(value)


def loads(text: str) -> Any:
    """Decode JSON a request builder replays, lone surrogates (raw or escaped) as U+FFFD."""
    return scrubbed(json.loads(text))


def text_block(text: str) -> c.ContentBlock:
    """Return a text block."""
    return c.ContentBlock(text=c.TextBlock(text=scrub(text)))


def raw_block(provider: str, kind: str, raw_json: str) -> c.ContentBlock:
    """Return a block this build does not model, carried verbatim (004 §2.1b)."""
    return c.ContentBlock(raw=c.RawBlock(provider=provider, type=kind, json=scrub_json(raw_json)))


def tool_call_block(index: int, provider_id: str, name: str, arguments: str) -> c.ContentBlock:
    """Return a tool_use block with the provider's exact argument string.

    Args:
        index: position of the call among this response's tool calls, from 0.
        provider_id: the id the provider gave the call ("" when none).
        name: the tool name as the model wrote it.
        arguments: the argument text exactly as received; "" when there was none.

    The call id defaults to the provider's id (made safe for every provider's id pattern),
    or "call_<index>"; the run loop may mint its own stable id (seed 000). Lone surrogates
    in the arguments (raw, or as JSON escapes) become U+FFFD; nothing else changes.
    """
    provider_id, name, arguments = scrub(provider_id), scrub(name), scrub_json(arguments)
    call = c.ToolCall(
        call_id=safe_id(provider_id) if provider_id else f"call_{index}",
        name=name,
        provider_call_id=provider_id,
        index=index,
    )
    if arguments == "" or is_json(arguments):
        call.arguments = arguments
    else:
        call.invalid_arguments = arguments
    return c.ContentBlock(tool_use=call)


def is_json(text: str) -> bool:
    """Return True when text is one complete JSON value, read strictly (core.jsontext).

    Arguments holding NaN, Infinity, -Infinity or a number beyond a float's range are not
    JSON: they travel as invalid_arguments, so no later request replays them as JSON.
    """
    try:
        jsontext.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def render_args(call: c.ToolCall) -> str:
    """Return the argument string to replay for a recorded call (seed 000 render.Args).

    The exact arguments when there were some (an escaped lone surrogate, from a session
    written before ingestion normalized them, as the escape of U+FFFD); "{}" when there were none; an
    object `{"invalid_json": ...}` (or `invalid_json_base64`) for arguments that were not JSON.
    """
    if call.invalid_arguments:
        key = "invalid_json_base64" if call.invalid_arguments_base64 else "invalid_json"
        return json.dumps({key: call.invalid_arguments})
    return scrub_json(call.arguments) or "{}"


def args_object(call: c.ToolCall) -> dict[str, Any]:
    """Return a recorded call's arguments as a JSON object (Anthropic's `input`); lone surrogates: U+FFFD."""
    value = loads(render_args(call))
    return value if isinstance(value, dict) else {"invalid_json": call.arguments}


def safe_id(call_id: str) -> str:
    """Return call_id made to match ^[A-Za-z0-9_-]{1,64}$ (Anthropic's tool_use id pattern).

    Ids already matching are kept; others get their bad characters replaced and a short
    hash of the original appended, so two different ids never collide.
    """
    if call_id and len(call_id) <= _ID_MAX and not _ID_BAD.search(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:10]
    cleaned = _ID_BAD.sub("_", call_id)[: _ID_MAX - 11]
    return f"{cleaned}_{digest}" if cleaned else f"call_{digest}"


def image_data_url(image: c.ImageBlock) -> str:
    """Return an image's URL, or a data: URL for inline bytes."""
    if image.url:
        return image.url
    return f"data:{image.media_type or 'image/png'};base64,{base64.b64encode(image.data).decode()}"


def tool_schema(spec: c.ToolSpec) -> dict[str, Any]:
    """Return a tool's parameter schema as an object (validated before any adapter runs)."""
    if not spec.parameters_json_schema:
        return {"type": "object", "properties": {}}
    value = loads(spec.parameters_json_schema)
    return value if isinstance(value, dict) else {"type": "object", "properties": {}}


def finish(response: c.ModelResponse) -> c.ModelResponse:
    """Drop tool_use blocks of a truncated, refused or window-stopped response; return it."""
    if response.stop_reason in _UNSAFE_STOPS:
        kept = [b for b in response.content if b.WhichOneof("block") != "tool_use"]
        del response.content[:]
        response.content.extend(kept)
    return response


def tool_calls(response: c.ModelResponse) -> list[c.ToolCall]:
    """Return the tool calls of a response, in order."""
    return [b.tool_use for b in response.content if b.WhichOneof("block") == "tool_use"]


def joined_text(blocks: Iterable[c.ContentBlock], sep: str = "\n\n") -> str:
    """Return the text blocks of blocks joined by sep."""
    return sep.join(b.text.text for b in blocks if b.WhichOneof("block") == "text")


def usage(input_tokens: int, output_tokens: int, cached: int = 0, reasoning: int = 0) -> c.Usage:
    """Return a Usage for one request (input includes cached, output includes reasoning)."""
    return c.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        reasoning_tokens=reasoning,
        requests=1,
    )


def dumps(value: Any) -> str:
    """Serialize compactly (for raw blocks we built ourselves)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
