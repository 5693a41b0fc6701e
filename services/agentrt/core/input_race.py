"""A racing input guardrail against the model call, as a state machine (004 §2.6, §2.5).

Racing (the default mode) runs the input stage's guardrails concurrently with the first
model call. The loop starts both, then tells an `InputRace` every event and does what the
returned `Action` says:

- a guardrail trips or errors while the call is in flight: CANCEL_MODEL: cancel the call
  (never billed, no response recorded) and the other guardrails; the run fails on
  `outcome.ended_by`;
- a guardrail trips or errors while a returned response is held: DISCARD_RESPONSE: the
  response was made (its usage is billed) but is not acted on; the run fails;
- every guardrail answered and none ends the run: WAIT for the model while the call is in
  flight, PROCEED with the held response once it returned;
- the model call returns while guardrails are pending: WAIT (hold the response, act on
  nothing); with every guardrail answered: PROCEED;
- the model call fails on its own: CANCEL_GUARDRAILS (those still pending): a slow guardrail
  must not hold an already-failed run open; the run fails with the model's error.

Once terminal, later events answer IGNORE: a guardrail's cancellation echo is the stop being
honored, not an outcome, so it never masks the model's error; a verdict delivered before
the model failed still wins (it ended the race first). A Replace of a racing guardrail
misses the call it raced and applies from the next turn (`outcome.replacement`).

Blocking input guardrails need no machine: a `guardrails.ParallelGate` completes before the
call is made (and before the input is persisted).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.core.guardrails import ParallelGate, Result, Stage


class Action(enum.StrEnum):
    """What the loop does after an event."""

    WAIT = "wait"
    IGNORE = "ignore"
    CANCEL_MODEL = "cancel_model"
    DISCARD_RESPONSE = "discard_response"
    CANCEL_GUARDRAILS = "cancel_guardrails"
    PROCEED = "proceed"


class Ending(enum.StrEnum):
    """How a finished race ended."""

    PROCEED = "proceed"
    TRIPPED = "tripped"
    MODEL_FAILED = "model_failed"


@dataclass(frozen=True)
class Outcome:
    """A finished race.

    Attributes:
        ending: PROCEED (act on the response), TRIPPED (the run fails on `ended_by`),
            MODEL_FAILED (the run fails with the model's error).
        ended_by: the guardrail result that ended the run (TRIPPED).
        replacement: a Replace to apply from the next turn on (PROCEED only).
        model_billed: the model call returned a response (its usage counts).
        cancelled: guardrails the loop cancelled, as results (every consulted guardrail
            leaves one).
    """

    ending: Ending
    ended_by: Result | None = None
    replacement: Result | None = None
    model_billed: bool = False
    cancelled: tuple[Result, ...] = ()


class InputRace:
    """One race of the input stage's racing guardrails against the first model call."""

    def __init__(self, guardrails: Sequence[str]) -> None:
        """Start a race between the model call and guardrails (names, declaration order)."""
        self._gate = ParallelGate(guardrails, Stage.INPUT)
        self._response = False
        self.outcome: Outcome | None = None

    @property
    def terminal(self) -> bool:
        """True once the race is decided (`outcome` is set)."""
        return self.outcome is not None

    def guardrail_done(self, result: Result) -> Action:
        """A racing guardrail answered (or failed); return what to do."""
        if self.terminal:
            return Action.IGNORE
        self._gate.offer(result)
        ended = self._gate.ended_by
        if ended is not None:
            cancelled = tuple(self._gate.cancelled(result.scope))
            self.outcome = Outcome(
                Ending.TRIPPED, ended_by=ended, model_billed=self._response, cancelled=cancelled
            )
            return Action.DISCARD_RESPONSE if self._response else Action.CANCEL_MODEL
        if self._gate.done and self._response:
            return self._proceed()
        return Action.WAIT

    def model_done(self) -> Action:
        """The model call returned its response; return what to do."""
        if self.terminal:
            return Action.IGNORE
        self._response = True
        return self._proceed() if self._gate.done else Action.WAIT

    def model_failed(self) -> Action:
        """The model call failed on its own (not because this race cancelled it)."""
        if self.terminal:
            return Action.IGNORE
        self.outcome = Outcome(Ending.MODEL_FAILED, cancelled=tuple(self._gate.cancelled()))
        return Action.CANCEL_GUARDRAILS

    @property
    def results(self) -> list[Result]:
        """The guardrail results received so far, in declaration order."""
        return self._gate.results

    def _proceed(self) -> Action:
        self.outcome = Outcome(Ending.PROCEED, replacement=self._gate.replacement, model_billed=True)
        return Action.PROCEED
