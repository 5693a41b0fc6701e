"""Between the gateway's protos and the pure core: responses, calls, content, messages.

- `response_in`: a gateway ModelResponse -> core `Response` (the raw argument text of
  each call is recovered exactly, including out-of-band invalid arguments).
- `call_out` / `call_in`: a core `Call` <-> the proto ToolCall the session stores.
- `messages_out`: core messages -> proto Messages for the gateway.
- `text_of`, `preserved_of`, `display_extra`: what the loop reads off content blocks and
  session entries.

Entry shapes the run loop writes (and this package reads) are documented in
docs/services/runs.md.
"""

from __future__ import annotations

import base64
import json

from agentrt.core import render
from agentrt.core.decide import (
    STOP_CONTEXT_WINDOW_EXCEEDED,
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_REFUSAL,
    STOP_TOOL_USE,
    Call,
    DecisionKind,
    ProposedCall,
    Response,
)
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

_STOPS = {
    cpb.STOP_REASON_TOOL_USE: STOP_TOOL_USE,
    cpb.STOP_REASON_END_TURN: STOP_END_TURN,
    cpb.STOP_REASON_MAX_TOKENS: STOP_MAX_TOKENS,
    cpb.STOP_REASON_REFUSAL: STOP_REFUSAL,
    cpb.STOP_REASON_CONTEXT_WINDOW_EXCEEDED: STOP_CONTEXT_WINDOW_EXCEEDED,
}
_KINDS = {
    DecisionKind.TOOL_CALLS: pb.DECISION_KIND_TOOL_CALLS,
    DecisionKind.FINAL: pb.DECISION_KIND_FINAL,
    DecisionKind.NO_TOOL_CALL: pb.DECISION_KIND_NO_TOOL_CALL,
    DecisionKind.TRUNCATED: pb.DECISION_KIND_TRUNCATED,
    DecisionKind.REFUSAL: pb.DECISION_KIND_REFUSAL,
}


def kind_out(kind: DecisionKind) -> int:
    """Return the proto DecisionKind of a core decision kind."""
    return _KINDS[kind]


def text_of(blocks: object) -> str:
    """Return the text blocks of a block list joined by newlines."""
    return "\n".join(b.text.text for b in blocks if b.WhichOneof("block") == "text")  # type: ignore[attr-defined]


def preserved_of(blocks: object) -> list[cpb.ContentBlock]:
    """Return the blocks replayed verbatim (thinking, raw provider blocks), in order."""
    return [b for b in blocks if b.WhichOneof("block") in ("thinking", "raw")]  # type: ignore[attr-defined]


def raw_arguments(call: cpb.ToolCall) -> str | bytes:
    """Return a call's argument text exactly as the model produced it."""
    if call.invalid_arguments:
        if call.invalid_arguments_base64:
            return base64.b64decode(call.invalid_arguments)
        return call.invalid_arguments
    return call.arguments


def response_in(resp: cpb.ModelResponse) -> Response:
    """Read a gateway response as the core decides on it."""
    calls = [
        ProposedCall(
            b.tool_use.name, raw_arguments(b.tool_use), b.tool_use.provider_call_id or b.tool_use.call_id
        )
        for b in resp.content
        if b.WhichOneof("block") == "tool_use"
    ]
    return Response(text_of(resp.content), calls, _STOPS.get(resp.stop_reason, ""), resp.refusal)


def call_out(call: Call) -> cpb.ToolCall:
    """Return the proto ToolCall of a recorded call (arguments exact, or out of band)."""
    return cpb.ToolCall(
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
        invalid_arguments=call.invalid_arguments,
        invalid_arguments_base64=call.invalid_base64,
        provider_call_id=call.provider_call_id,
        index=call.index,
    )


def call_in(call: cpb.ToolCall) -> Call:
    """Return the core Call of a stored proto ToolCall."""
    return Call(
        call.index,
        call.call_id,
        call.name,
        call.arguments,
        call.invalid_arguments,
        call.invalid_arguments_base64,
        call.provider_call_id,
    )


def display_extra(entry: spb.Entry) -> dict[str, object]:
    """Return the entry's display.extra_json as a dict ({} when absent or malformed)."""
    if not entry.HasField("display") or not entry.display.extra_json:
        return {}
    try:
        value = json.loads(entry.display.extra_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def messages_out(messages: list[render.Message]) -> list[cpb.Message]:
    """Return the proto Messages of rendered core messages."""
    out = []
    for m in messages:
        role = {render.ROLE_USER: cpb.ROLE_USER, render.ROLE_SYSTEM: cpb.ROLE_SYSTEM}.get(
            m.role, cpb.ROLE_ASSISTANT
        )
        blocks = []
        for b in m.blocks:
            if isinstance(b, render.TextBlock):
                blocks.append(cpb.ContentBlock(text=cpb.TextBlock(text=b.text)))
            elif isinstance(b, render.ToolUseBlock):
                blocks.append(
                    cpb.ContentBlock(
                        tool_use=cpb.ToolCall(call_id=b.call_id, name=b.name, arguments=b.input_json)
                    )
                )
            elif isinstance(b, render.ToolResultBlock):
                blocks.append(
                    cpb.ContentBlock(
                        tool_result=cpb.ToolResult(
                            call_id=b.call_id, name=b.name, content=b.content, is_error=b.is_error
                        )
                    )
                )
            elif isinstance(b.value, cpb.ContentBlock):
                blocks.append(b.value)
        out.append(cpb.Message(role=role, content=blocks))
    return out
