"""Turn a recorded conversation into provider-neutral model messages (seed 000 render).

The history is a sequence of `UserTurn` (input from the caller; the first one is the
opening), `Step` (one recorded model turn: its decision, its calls and their
observations) and `Summary` (a live compaction checkpoint's summary). `messages()` renders:

- each `Summary` as a system message, up front, in order (004 §2.5f: the summary of
  what was folded reaches the model as a system message, wherever its checkpoint sits);
- an opening user message when what is left does not start with one (a checkpoint may
  leave the view opening with a model step): `CONTINUATION_OPENING`, so a compacted
  session is always a valid request;
- a user message per `UserTurn`;
- per step with a recorded decision, an assistant message (preserved provider blocks,
  then the reason text, then one tool_use block per call with the runtime's call id),
  followed, for steps that expect an answer, by a user message: one tool_result block
  per call in call order (error flag when failed), or the nudge for no_tool_call and
  truncated decisions. Final and refusal steps render the answer text and no user turn.
- steps with no recorded decision are skipped and take no place in the results window.

The window counts rendered steps that carry observations: the last `recent_results` of
them show each result in full (capped at `result_max_bytes` with `truncate`); older ones
show the result's summary (or a short head of it when the tool wrote none). A call with no
recorded result renders as `INTERRUPTED_TEXT`; an interrupted result that carries text
(a session repair's, the run loop's) renders that text, which says what is known.
Nothing here promises what a tool cannot do: a repeated call is a new call. Consecutive
messages of one role are merged, tool results first, so every provider accepts the
alternation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentrt.core import jsontext
from agentrt.core.decide import Call, DecisionKind
from agentrt.core.truncate import truncate

ROLE_SYSTEM = "system"
ROLE_USER = "user"
ROLE_ASSISTANT = "assistant"

DEFAULT_RECENT_RESULTS = 6
DEFAULT_RESULT_MAX_BYTES = 16_384
#: Size of the head shown for an old result whose tool wrote no summary, in bytes.
SUMMARY_FALLBACK_BYTES = 256

#: What the model reads for a call with no recorded result (seed 000 InterruptedText).
INTERRUPTED_TEXT = (
    "No result was recorded for this call: the process running it stopped, so its outcome is "
    "unknown. Check the current state before relying on it; call the tool again only if running "
    "it twice is harmless."
)
#: The re-request the run loop writes for an interrupted call of a read-only or retry-safe
#: tool (seed 000: those keep the re-request; a new call runs the tool again, harmlessly).
RERUN_SAFE_TEXT = (
    "The tool was still running when the process stopped, so its outcome is unknown. Running "
    "this tool again is harmless: call it again if you still need its result."
)
#: The opening user turn of a view that starts with a model step (after a compaction).
CONTINUATION_OPENING = "(The conversation continues; earlier turns are summarized above.)"
#: The user turn after a reply that asked for nothing.
NUDGE_NO_TOOL_CALL = (
    "Your reply neither called a tool nor gave an answer. "
    "Call exactly one tool, or reply with your final answer as plain text."
)
#: The user turn after a reply cut at the output token cap.
NUDGE_TRUNCATED = (
    "Your reply reached the output token limit before it was complete, so no tool ran. "
    "Reply again with exactly one short tool call."
)
#: The assistant text of a step that called nothing and said nothing.
NO_TOOL_CALL_TEXT = "(no tool call)"


@dataclass(frozen=True)
class TextBlock:
    """Plain text."""

    text: str


@dataclass(frozen=True)
class ToolUseBlock:
    """A tool call in an assistant message; input_json is what `args_json` returns."""

    call_id: str
    name: str
    input_json: str


@dataclass(frozen=True)
class ToolResultBlock:
    """A tool result in a user message."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class PreservedBlock:
    """A provider block replayed exactly as recorded (e.g. signed thinking); opaque here."""

    value: object


Block = TextBlock | ToolUseBlock | ToolResultBlock | PreservedBlock


@dataclass
class Message:
    """One rendered message: role is ROLE_USER or ROLE_ASSISTANT; blocks in order."""

    role: str
    blocks: list[Block] = field(default_factory=list)


@dataclass(frozen=True)
class Observation:
    """A call's recorded result.

    Attributes:
        content: what the model sees in full.
        is_error: the result reports a failure.
        summary: one line standing in for the content once the result leaves the window.
        interrupted: the outcome is unknown (the process died while the tool ran).
    """

    content: str = ""
    is_error: bool = False
    summary: str = ""
    interrupted: bool = False


@dataclass(frozen=True)
class UserTurn:
    """Input from the caller: the opening, a later run's input, or injected input."""

    text: str


@dataclass(frozen=True)
class Summary:
    """A live compaction checkpoint's summary (rendered up front as a system message)."""

    text: str


@dataclass(frozen=True)
class Step:
    """One recorded model turn.

    Attributes:
        kind: the decision; None when none was recorded (the step is skipped).
        reason: the decision's reason text (already capped by decide).
        final_output: the full answer of a final step (the refusal text of a refusal).
        calls: the calls acted on, in call order.
        observations: results by call id; a call without one renders as interrupted.
        preserved: provider blocks replayed before the text, verbatim.
    """

    kind: DecisionKind | None
    reason: str = ""
    final_output: str = ""
    calls: tuple[Call, ...] = ()
    observations: Mapping[str, Observation] = field(default_factory=dict)
    preserved: tuple[object, ...] = ()


def args_json(call: Call) -> str:
    """Return the tool_use input of call (seed 000 render.Args).

    The exact arguments; "{}" when there were none; for out-of-band arguments the object
    {"invalid_json": ...} (or {"invalid_json_base64": ...}). Arguments recorded as JSON that
    hold a non-finite number (NaN, Infinity: JSON only to a lenient reader, recorded before
    the gateway read model output strictly, decision 0043) are out of band too: replayed as
    they are, every provider request of the session would be refused.
    """
    if call.invalid_arguments:
        key = "invalid_json_base64" if call.invalid_base64 else "invalid_json"
        return json.dumps({key: call.invalid_arguments}, ensure_ascii=False)
    if jsontext.lenient_only(call.arguments):
        return json.dumps({"invalid_json": call.arguments}, ensure_ascii=False)
    return call.arguments if call.arguments.strip() else "{}"


def _observes(step: Step) -> bool:
    return step.kind in (DecisionKind.TOOL_CALLS, DecisionKind.NO_TOOL_CALL, DecisionKind.TRUNCATED)


def observation_text(obs: Observation | None, *, full: bool, max_bytes: int) -> str:
    """Return what the model sees for one result (seed 000 DefaultObservation).

    Args:
        obs: the result; None means no outcome was recorded (interrupted).
        full: inside the recent-results window.
        max_bytes: cap on the rendered content, in bytes.
    """
    if obs is None or (obs.interrupted and not obs.content):
        return INTERRUPTED_TEXT
    if obs.interrupted:
        return truncate(obs.content, max_bytes)
    if full:
        return truncate(obs.content, max_bytes)
    head = obs.summary or truncate(obs.content, SUMMARY_FALLBACK_BYTES)
    return truncate(head, max_bytes)


def _assistant(step: Step) -> Message:
    blocks: list[Block] = [PreservedBlock(v) for v in step.preserved]
    if step.kind in (DecisionKind.FINAL, DecisionKind.REFUSAL):
        text = step.final_output or step.reason
        if text:
            blocks.append(TextBlock(text))
        return Message(ROLE_ASSISTANT, blocks)
    if step.kind == DecisionKind.TOOL_CALLS and step.calls:
        if step.reason:
            blocks.append(TextBlock(step.reason))
        blocks.extend(ToolUseBlock(c.call_id, c.name, args_json(c)) for c in step.calls)
        return Message(ROLE_ASSISTANT, blocks)
    blocks.append(TextBlock(step.reason or NO_TOOL_CALL_TEXT))
    return Message(ROLE_ASSISTANT, blocks)


def _observation_turn(step: Step, full: bool, max_bytes: int) -> Message:
    if step.kind == DecisionKind.TRUNCATED:
        return Message(ROLE_USER, [TextBlock(NUDGE_TRUNCATED)])
    if step.kind != DecisionKind.TOOL_CALLS or not step.calls:
        return Message(ROLE_USER, [TextBlock(NUDGE_NO_TOOL_CALL)])
    blocks: list[Block] = []
    for call in step.calls:
        obs = step.observations.get(call.call_id)
        is_error = True if obs is None or obs.interrupted else obs.is_error
        blocks.append(
            ToolResultBlock(
                call.call_id, call.name, observation_text(obs, full=full, max_bytes=max_bytes), is_error
            )
        )
    return Message(ROLE_USER, blocks)


def _append(out: list[Message], msg: Message) -> None:
    if not msg.blocks:
        return
    if out and out[-1].role == msg.role:
        merged = out[-1].blocks + msg.blocks
        # Anthropic wants tool results first in a user message; keep their relative order.
        if msg.role == ROLE_USER:
            merged = [b for b in merged if isinstance(b, ToolResultBlock)] + [
                b for b in merged if not isinstance(b, ToolResultBlock)
            ]
        out[-1] = Message(msg.role, merged)
        return
    out.append(msg)


def messages(
    history: Sequence[UserTurn | Step | Summary],
    *,
    recent_results: int = DEFAULT_RECENT_RESULTS,
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
) -> list[Message]:
    """Render history into messages (see the module docstring).

    Args:
        history: the conversation in order; summaries may sit anywhere.
        recent_results: how many of the last rendered steps show results in full (>= 0).
        result_max_bytes: cap on one rendered result, in bytes.

    Returns:
        The summaries' system messages, then messages alternating user/assistant, starting
        with a user message (the opening, or CONTINUATION_OPENING).

    Raises:
        ValueError: the history holds no user turn and no step (nothing to render).
    """
    summaries = [h for h in history if isinstance(h, Summary) and h.text]
    rendered = [h for h in history if isinstance(h, UserTurn) or (isinstance(h, Step) and h.kind is not None)]
    if not rendered:
        raise ValueError("the history holds nothing to render")
    if not isinstance(rendered[0], UserTurn):
        rendered.insert(0, UserTurn(CONTINUATION_OPENING))
    observing = [i for i, h in enumerate(rendered) if isinstance(h, Step) and _observes(h)]
    in_full = set(observing[len(observing) - max(recent_results, 0) :]) if recent_results > 0 else set()
    out: list[Message] = [Message(ROLE_SYSTEM, [TextBlock(s.text)]) for s in summaries]
    for i, item in enumerate(rendered):
        if isinstance(item, UserTurn):
            _append(out, Message(ROLE_USER, [TextBlock(item.text)]))
            continue
        _append(out, _assistant(item))
        if _observes(item):
            _append(out, _observation_turn(item, i in in_full, result_max_bytes))
    return out
