"""Stopping early, the closing tool-free call, and the error handlers (004 §2.3c, §2.7d, §2.10).

A turn that would otherwise continue can be ended from two places, and only two:

- tool level: every call of the batch asks to terminate (`terminate_output`); the final
  output is the last call's output;
- run level: StopAfterTurn, asked at the save point (`stop_at_save_point`); the final
  output is the turn's last message, else its last tool output (`stop_output`).

The stop is asked only at a save point that would take another turn (a handoff included),
never on a turn that already ends the run; a stopped run has its full history saved.

When the turn budget runs out (`on_turn_budget`), `final_turn_without_tools` buys one more
model call with no tools and no handoffs; after it (or without it) the max_turns handler
decides: fail, or complete with its fallback message. A refusal goes through its handler
the same way (`on_refusal`). Every recovered output (a fallback, a stop's derived output)
finishes through the same path as a model's answer: output guardrails, then persistence.
A tripped tool-loop valve has no handler.

Pure: the loop feeds facts (flags, texts) and acts on the returned outcome.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

#: Failure kinds decided here.
KIND_MAX_TURNS = "max_turns"
KIND_REFUSAL = "refusal"


class HandlerAction(enum.StrEnum):
    """What a recoverable failure turns into (ErrorHandlerAction)."""

    FAIL = "fail"
    FALLBACK = "fallback"


@dataclass(frozen=True)
class Handler:
    """One error handler: fail (the default), or complete with `fallback` as the output."""

    action: HandlerAction = HandlerAction.FAIL
    fallback: str = ""

    @property
    def fallback_output(self) -> str | None:
        """The fallback message when the action is FALLBACK, else None."""
        return self.fallback if self.action == HandlerAction.FALLBACK else None


@dataclass(frozen=True)
class Handlers:
    """The run's error handlers (ErrorHandlers), read from the entry agent."""

    max_turns: Handler = Handler()
    refusal: Handler = Handler()
    invalid_final_output: Handler = Handler()


@dataclass(frozen=True)
class BatchResult:
    """What stopping needs of one call's result in a batch.

    Attributes:
        content: the model-facing content.
        terminate: the result asks the run to stop (a client's ToolResult.terminate, or an
            OK result of a tool with AgentTool.terminates_run).
    """

    content: str
    terminate: bool


def terminate_output(batch: Sequence[BatchResult]) -> str | None:
    """Return the final output when every call of the batch asks to terminate, else None.

    Unanimity (004 §2.7b): one call wanting to stop while another is still working is not
    a decision the runtime can make for them. The batch is every call of the turn's
    response that got a result (runtime-answered ones included: a denied call does not
    ask). The output is the last call's content. An empty batch never terminates.
    """
    if not batch or not all(r.terminate for r in batch):
        return None
    return batch[-1].content


def stop_at_save_point(*, stop_requested: bool, turn_continues: bool) -> bool:
    """True when the run stops at this save point (004 §2.3a step 2, §2.3c).

    Args:
        stop_requested: StopAfterTurn was accepted for the run (survives resume).
        turn_continues: the turn would take another turn (tool results to read, a nudge, a
            handoff). A turn that already ends the run is not asked.
    """
    return stop_requested and turn_continues


def stop_output(message_text: str, tool_outputs: Sequence[str]) -> str:
    """Return a stopped run's final output: the turn's last message, else its last tool output.

    Derived from the turn, so the result cannot disagree with the saved history; "" when
    the turn had neither.
    """
    if message_text.strip():
        return message_text
    return tool_outputs[-1] if tool_outputs else ""


class BudgetKind(enum.StrEnum):
    """What the turn budget check decides before a model call."""

    CONTINUE = "continue"
    CLOSING_CALL = "closing_call"
    FALLBACK = "fallback"
    FAIL = "fail"


@dataclass(frozen=True)
class BudgetOutcome:
    """The budget's decision; `output` is the fallback when kind is FALLBACK."""

    kind: BudgetKind
    output: str = ""


def on_turn_budget(
    turn: int, max_turns: int, *, final_turn_without_tools: bool, closing_used: bool, handler: Handler
) -> BudgetOutcome:
    """Decide the model call of `turn` against the budget (004 §2.1, §2.7d, §2.10).

    Args:
        turn: the turn about to call the model, from 1 (handoffs do not reset it).
        max_turns: the run's budget (>= 1).
        final_turn_without_tools: the entry agent opted in to a tool-free closing call.
        closing_used: that call was already made (the run log says so).
        handler: the max_turns handler.

    Returns:
        CONTINUE within the budget; CLOSING_CALL for the one tool-free call past it (no
        tools, no handoffs offered); then FALLBACK (complete with the handler's message)
        or FAIL (kind KIND_MAX_TURNS).
    """
    if turn <= max_turns:
        return BudgetOutcome(BudgetKind.CONTINUE)
    if final_turn_without_tools and not closing_used:
        return BudgetOutcome(BudgetKind.CLOSING_CALL)
    return _handled(handler)


def on_refusal(handler: Handler) -> BudgetOutcome:
    """Decide a refusal (004 §2.3: it wins over any content): FALLBACK, or FAIL (kind refusal)."""
    return _handled(handler)


def _handled(handler: Handler) -> BudgetOutcome:
    fallback = handler.fallback_output
    if fallback is not None:
        return BudgetOutcome(BudgetKind.FALLBACK, fallback)
    return BudgetOutcome(BudgetKind.FAIL)
