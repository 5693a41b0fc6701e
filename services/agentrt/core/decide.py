"""Classify a model response into a decision (seed 000 Decide; 004 §2.3, §2.7e).

A `Response` is the provider-neutral reading of one model reply: its text, the tool
calls it proposed (arguments exactly as produced), the canonical stop reason and any
refusal. `decide()` maps it onto one of five kinds:

- ``refusal``: the stop reason is refusal or a refusal text is present; wins over all.
- ``truncated``: the output token cap cut the reply. None of its tool calls is carried
  into the decision, so none executes and none pauses (004 §2.7e).
- ``tool_calls``: at least one tool call. In single-call mode only the first is kept and
  the others are named in the reason as not executed.
- ``final``: no call, non-blank text, and the model ended its turn (end_turn, or no stop
  reason at all): the text is the final answer (004 §2.3).
- ``no_tool_call``: anything else (an empty reply, text with a tool_use stop and no call);
  the next render nudges the model.

A reply the context window stopped (Anthropic's `model_context_window_exceeded`) is not a
decision at all but a context overflow (004 §2.5g): resending the same context would stop
at the same wall, and compacting is what helps. Callers check `is_overflow` first; `decide`
itself drops such a reply's calls and nudges, never calling it a truncation.

Invariants: the reason is capped at REASON_BYTES after it is composed, on every branch;
arguments that are not a JSON object are kept out of band (`invalid_arguments`, base64
when not UTF-8) and never re-serialized; call ids come from the caller's `call_id`
function, so they are the runtime's and stable across processes.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentrt.core.truncate import byte_len, truncate

#: Cap on a decision's reason text, in bytes (seed 000 ReasonBytes).
REASON_BYTES = 500
#: Cap on one tool name inside the not-executed note, in bytes (seed 000 NameBytes).
NAME_BYTES = 64
#: Cap on the not-executed note, in bytes: half of REASON_BYTES.
NOTE_BYTES = REASON_BYTES // 2

STOP_TOOL_USE = "tool_use"
STOP_END_TURN = "end_turn"
STOP_MAX_TOKENS = "max_tokens"
STOP_REFUSAL = "refusal"
STOP_CONTEXT_WINDOW_EXCEEDED = "model_context_window_exceeded"


class DecisionKind(enum.StrEnum):
    """How a response was classified; the values are stored and rendered verbatim."""

    TOOL_CALLS = "tool_calls"
    FINAL = "final"
    NO_TOOL_CALL = "no_tool_call"
    TRUNCATED = "truncated"
    REFUSAL = "refusal"


@dataclass(frozen=True)
class ProposedCall:
    """A tool call as the model produced it.

    Attributes:
        name: the tool name as written by the model.
        arguments: the argument text exactly as produced (bytes when the transport
            delivered raw bytes that may not be UTF-8).
        provider_call_id: the provider's id for the call; kept for audit only.
    """

    name: str
    arguments: str | bytes = ""
    provider_call_id: str = ""


@dataclass(frozen=True)
class Response:
    """The provider-neutral reading of one model reply.

    Attributes:
        text: the assistant text, blocks joined in order.
        calls: the proposed tool calls in the order the model wrote them.
        stop_reason: one of the STOP_* constants, or "" when the provider gave none.
        refusal: refusal text, when the model refused.
    """

    text: str = ""
    calls: Sequence[ProposedCall] = ()
    stop_reason: str = ""
    refusal: str = ""


@dataclass(frozen=True)
class Call:
    """A tool call as the runtime records it.

    Attributes:
        index: position within its response, from 0.
        call_id: the runtime-minted id (see `mint_call_id`).
        name: the tool name.
        arguments: the exact argument text when it was a JSON object (or empty); "" otherwise.
        invalid_arguments: the argument text when it was not a JSON object; base64 of the
            raw bytes when they were not UTF-8.
        invalid_base64: True when invalid_arguments is base64.
        provider_call_id: the provider's id, audit only.
    """

    index: int
    call_id: str
    name: str
    arguments: str = ""
    invalid_arguments: str = ""
    invalid_base64: bool = False
    provider_call_id: str = ""

    @property
    def has_invalid_arguments(self) -> bool:
        """True when the arguments were kept out of band."""
        return bool(self.invalid_arguments)


@dataclass(frozen=True)
class Decision:
    """What the runtime does with a response.

    Attributes:
        kind: the classification.
        reason: the text the next render shows for this step, at most REASON_BYTES bytes.
        calls: calls to act on, in call order (empty unless kind is tool_calls).
        not_executed: calls named in the reason as not executed (single-call mode).
        final_output: the full answer text when kind is final ("" otherwise).
        dropped_calls: calls of a truncated or refused reply that were discarded.
    """

    kind: DecisionKind
    reason: str = ""
    calls: tuple[Call, ...] = ()
    not_executed: tuple[Call, ...] = ()
    final_output: str = ""
    dropped_calls: int = field(default=0)


def mint_call_id(run_id: str, turn: int, index: int) -> str:
    """Return the runtime's stable id for call `index` of `turn` of `run_id`.

    The id is derived from the run log alone, so every process renders the same id, and
    it matches ^[a-zA-Z0-9_-]+$ (what Anthropic accepts). The run id's last 12 characters
    are random, which keeps ids of different runs of one session apart.
    """
    tail = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in run_id[-12:])
    return f"call_{tail}_{turn}_{index}"


def classify_arguments(raw: str | bytes) -> tuple[str, str, bool]:
    """Split raw argument text into (arguments, invalid_arguments, invalid_base64).

    Empty text is valid (a call with no arguments). Text that parses as a JSON object is
    kept exactly as produced. Anything else is kept out of band: the text itself, or the
    base64 of the bytes when they are not UTF-8. Nothing is ever re-serialized.
    """
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return "", base64.b64encode(raw).decode("ascii"), True
    else:
        text = raw
    if text.strip() == "":
        return "", "", False
    try:
        parsed = json.loads(text)
    except ValueError:
        return "", text, False
    if not isinstance(parsed, dict):
        return "", text, False
    return text, "", False


def not_executed_note(names: Sequence[str]) -> str:
    """Return the note naming tool calls that were not executed, at most NOTE_BYTES bytes.

    Shape: ``[N further tool call(s) not executed: a, b]``; each name is capped at
    NAME_BYTES, and names that do not fit are elided with ``, …`` so the count is always
    told. "" when names is empty.
    """
    if not names:
        return ""
    head = f"[{len(names)} further tool call(s) not executed: "
    capped = [truncate(name, NAME_BYTES) for name in names]
    shown: list[str] = []
    for i, name in enumerate(capped):
        # Leave room for the elision mark whenever names remain after this one.
        tail = ", …]" if i + 1 < len(capped) else "]"
        if byte_len(head + ", ".join([*shown, name]) + tail) > NOTE_BYTES:
            break
        shown.append(name)
    body = ", ".join(shown)
    if len(shown) < len(capped):
        body = f"{body}, …" if body else "…"
    return head + body + "]"


def compose_reason(text: str, note: str = "") -> str:
    """Compose the reason from the model's text and a note, capped at REASON_BYTES.

    The note is composed first and the text gets what is left, so the note always
    survives the cap.
    """
    text = text.strip()
    if not note:
        return truncate(text, REASON_BYTES)
    if not text:
        return truncate(note, REASON_BYTES)
    room = REASON_BYTES - byte_len(note) - 1
    return truncate(truncate(text, room) + " " + note, REASON_BYTES) if room > 0 else note


def is_overflow(response: Response) -> bool:
    """True when the context window stopped the reply: an overflow, not a truncation (004 §2.5g)."""
    return response.stop_reason == STOP_CONTEXT_WINDOW_EXCEEDED


def _default_id(index: int) -> str:
    return f"call_{index}"


def decide(
    response: Response, *, single_call: bool = False, call_id: Callable[[int], str] = _default_id
) -> Decision:
    """Classify response (see the module docstring for the rules; seed 000 Decide).

    Args:
        response: the reply.
        single_call: only the first tool call is acted on; the rest are named as not executed.
        call_id: mints the runtime id of the call at a given index.

    Returns:
        The decision; its reason is at most REASON_BYTES bytes.
    """
    calls = tuple(_record(i, c, call_id(i)) for i, c in enumerate(response.calls))
    if response.stop_reason == STOP_REFUSAL or response.refusal:
        reason = compose_reason(response.refusal or response.text)
        return Decision(DecisionKind.REFUSAL, reason, dropped_calls=len(calls))
    if response.stop_reason == STOP_MAX_TOKENS:
        return Decision(DecisionKind.TRUNCATED, compose_reason(response.text), dropped_calls=len(calls))
    if is_overflow(response):
        return Decision(DecisionKind.NO_TOOL_CALL, compose_reason(response.text), dropped_calls=len(calls))
    if calls:
        if single_call and len(calls) > 1:
            rest = calls[1:]
            note = not_executed_note([c.name for c in rest])
            return Decision(DecisionKind.TOOL_CALLS, compose_reason(response.text, note), calls[:1], rest)
        return Decision(DecisionKind.TOOL_CALLS, compose_reason(response.text), calls)
    if response.text.strip() and response.stop_reason in (STOP_END_TURN, ""):
        return Decision(DecisionKind.FINAL, compose_reason(response.text), final_output=response.text)
    return Decision(DecisionKind.NO_TOOL_CALL, compose_reason(response.text))


def _record(index: int, proposed: ProposedCall, call_id: str) -> Call:
    arguments, invalid, b64 = classify_arguments(proposed.arguments)
    return Call(index, call_id, proposed.name, arguments, invalid, b64, proposed.provider_call_id)
