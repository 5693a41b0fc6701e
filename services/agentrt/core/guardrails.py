"""Guardrails: four stages, their ordering, pattern checks and model verdicts (004 §2.6).

One guardrail type covers every stage; placement decides scope (the AgentSpec's cover
the run while that agent's turn runs, an AgentTool's cover that tool only):

| stage | inspects | Replace means |
| --- | --- | --- |
| input | the run's input, first turn (blocking, or racing the model call) | the input the model reads |
| output | the final output, before persistence | the final output |
| tool_input | a call's exact argument text, before it executes | the call's result (it does not run) |
| tool_output | a result's content, before the model sees it | the content the model sees |

Ordering, as the loop must drive it:
- input and output: every guardrail of the stage runs concurrently and fails fast: the
  first tripwire or error ends the wait (`ParallelGate.offer` says so) and the rest are
  cancelled (`ParallelGate.cancelled` gives their results). Of several Replaces, the first
  in declaration order wins.
- tool_input and tool_output: in order (`tool_order`: the agent's, then the tool's), stopping
  at the first Replace or Trip (`SequentialGate`): once one has substituted the content,
  running the others against the original is meaningless.
- racing input guardrails against the model call: `core.input_race`.

Kinds:
- pattern (`PatternRule`, `evaluate_pattern`): regular expressions searched in the text with
  the command policy's bounded machinery (`core.policy`: same syntax, limits and CPU-time
  budget); running out of time is an error of the guardrail (fail closed);
- model (`judge_request`, `verdict_result`): a judge model's reply must be the JSON object
  {"decision": "allow"|"replace"|"trip", "message": str}; anything else is an error.

A result whose guardrail tripped or errored ends the run: kind KIND_TRIPPED or KIND_FAILED.
Pure: no I/O; the loop makes the model call of a model guardrail.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrt.core.policy import CHECK_BUDGET_SECONDS, TIMEOUT, compile_policy, validate_patterns

#: Failure kind of a run a guardrail tripped.
KIND_TRIPPED = "guardrail_tripped"
#: Failure kind of a run a guardrail could not decide for (error, time budget, bad verdict).
KIND_FAILED = "guardrail_failed"
#: Scopes of a guardrail: declared on the AgentSpec or on an AgentTool.
SCOPE_AGENT = "agent"
SCOPE_TOOL = "tool"
#: The result of a guardrail cancelled because another one ended the stage first.
CANCELLED_TEXT = "cancelled: another guardrail of the stage ended it first"
#: Cap on the inspected text shown to a judge model, in characters.
JUDGE_TEXT_CHARS = 100_000
#: The structured output a judge model is asked for.
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["allow", "replace", "trip"]},
        "message": {"type": "string"},
    },
    "required": ["decision", "message"],
    "additionalProperties": False,
}


class Stage(enum.StrEnum):
    """Where a guardrail inspects the run."""

    INPUT = "input"
    OUTPUT = "output"
    TOOL_INPUT = "tool_input"
    TOOL_OUTPUT = "tool_output"

    @property
    def concurrent(self) -> bool:
        """True for the stages whose guardrails run at once and fail fast (input, output)."""
        return self in (Stage.INPUT, Stage.OUTPUT)


class Decision(enum.StrEnum):
    """What a guardrail decided."""

    ALLOW = "allow"
    REPLACE = "replace"
    TRIP = "trip"


@dataclass(frozen=True)
class Result:
    """One consulted guardrail's outcome (becomes a `guardrail_result` event).

    Attributes:
        guardrail: its name.
        stage: the stage it inspected.
        decision: what it decided; None when it failed or was cancelled (see `error`).
        message: the replacement (REPLACE) or why (TRIP; a judge's reason for ALLOW).
        error: why it could not decide; "" when it decided.
        call_id: the inspected call (tool stages).
        scope: SCOPE_AGENT or SCOPE_TOOL.
    """

    guardrail: str
    stage: Stage
    decision: Decision | None
    message: str = ""
    error: str = ""
    call_id: str = ""
    scope: str = SCOPE_AGENT

    @property
    def ends_run(self) -> bool:
        """True when the run fails on it: a tripwire, or an error that is not a cancellation."""
        return self.decision == Decision.TRIP or (bool(self.error) and self.error != CANCELLED_TEXT)

    @property
    def failure_kind(self) -> str:
        """KIND_TRIPPED for a tripwire, KIND_FAILED for an error ("" when it does not end the run)."""
        if self.decision == Decision.TRIP:
            return KIND_TRIPPED
        return KIND_FAILED if self.ends_run else ""

    def failure_message(self) -> str:
        """Return the user-safe message of the run's failure, naming the guardrail and stage."""
        where = f"{self.stage} guardrail {self.guardrail!r}"
        if self.decision == Decision.TRIP:
            return f"The {where} tripped" + (f": {self.message}" if self.message else ".")
        return f"The {where} could not decide: {self.error}"

    def failure_details(self) -> dict[str, str]:
        """Return FailureInfo.details_json's facts: guardrail, stage, scope, call_id."""
        return {
            "guardrail": self.guardrail,
            "stage": str(self.stage),
            "scope": self.scope,
            "call_id": self.call_id,
        }


class ParallelGate:
    """The fail-fast wait of the input or output stage's concurrent guardrails.

    Feed results as they arrive with `offer`; it returns True once the wait should end:
    a result that ends the run arrived (the rest are to be cancelled), or every guardrail
    has answered.
    """

    def __init__(self, names: Sequence[str], stage: Stage) -> None:
        """Wait for the guardrails `names` (declaration order) of `stage`."""
        self.stage = stage
        self._order = list(names)
        self._results: dict[str, Result] = {}
        self.ended_by: Result | None = None

    @property
    def done(self) -> bool:
        """True once the stage is decided (every answer in, or one ended the run)."""
        return self.ended_by is not None or len(self._results) == len(self._order)

    def offer(self, result: Result) -> bool:
        """Record one guardrail's result; return True when the wait is over.

        Results after the stage is decided, and repeats, are ignored (the cancellation
        echo of a guardrail told to stop is not an outcome).
        """
        if self.done or result.guardrail in self._results or result.guardrail not in self._order:
            return self.done
        self._results[result.guardrail] = result
        if result.ends_run:
            self.ended_by = result
        return self.done

    @property
    def pending(self) -> list[str]:
        """Guardrails not answered yet, in declaration order."""
        return [n for n in self._order if n not in self._results]

    def cancelled(self, scope: str = SCOPE_AGENT) -> list[Result]:
        """Return results for the guardrails still pending (the loop cancels them)."""
        return [Result(n, self.stage, None, error=CANCELLED_TEXT, scope=scope) for n in self.pending]

    @property
    def replacement(self) -> Result | None:
        """The winning Replace (first in declaration order) once decided without a tripwire."""
        if self.ended_by is not None or not self.done:
            return None
        return next(
            (self._results[n] for n in self._order if self._results[n].decision == Decision.REPLACE), None
        )

    @property
    def results(self) -> list[Result]:
        """The results received, in declaration order."""
        return [self._results[n] for n in self._order if n in self._results]


@dataclass
class SequentialGate:
    """The in-order consultation of a tool stage, stopping at the first Replace or Trip.

    Ask `next()` for the guardrail to consult, `offer()` its result, until `next()` is None.
    `outcome` is the result that stopped it (a Replace, a Trip or an error), or None when
    every guardrail allowed.
    """

    entries: Sequence[tuple[str, str]]
    outcome: Result | None = None
    results: list[Result] = field(default_factory=list)

    def next(self) -> tuple[str, str] | None:
        """Return (name, scope) of the next guardrail to consult; None when the stage is over."""
        if self.outcome is not None or len(self.results) >= len(self.entries):
            return None
        return self.entries[len(self.results)]

    def offer(self, result: Result) -> None:
        """Record the result of the guardrail `next()` named."""
        self.results.append(result)
        if result.decision in (Decision.REPLACE, Decision.TRIP) or result.ends_run:
            self.outcome = result


def tool_order(agent: Sequence[str], tool: Sequence[str]) -> list[tuple[str, str]]:
    """Return the (name, scope) order of a tool stage: the agent's guardrails, then the tool's."""
    return [(n, SCOPE_AGENT) for n in agent] + [(n, SCOPE_TOOL) for n in tool]


# -- pattern guardrails -------------------------------------------------------------------


@dataclass(frozen=True)
class PatternRule:
    """A pattern guardrail (PatternGuardrail).

    Attributes:
        name: the guardrail's name.
        patterns: regular expressions (core.policy syntax); any match fires.
        on_match: TRIP or REPLACE.
        replacement: the content a REPLACE puts in place of the inspected text.
        message: a TRIP's user-safe text; "" = one naming the pattern.
    """

    name: str
    patterns: tuple[str, ...]
    on_match: Decision = Decision.TRIP
    replacement: str = ""
    message: str = ""


def check_pattern_rule(rule: PatternRule) -> None:
    """Check that every pattern is usable (RegisterAgent/StartRun); change nothing.

    Raises:
        core.policy.PatternError: the first pattern that does not compile or is too long,
            or too many patterns (its `field` reads "deny[i]"; the index is the pattern's).
    """
    validate_patterns((), rule.patterns)


def evaluate_pattern(
    rule: PatternRule,
    stage: Stage,
    text: str,
    *,
    call_id: str = "",
    scope: str = SCOPE_AGENT,
    budget: float = CHECK_BUDGET_SECONDS,
) -> Result:
    """Search the patterns in the whole text under the CPU-time budget; return the result.

    Args:
        rule: the guardrail.
        stage: the stage being checked.
        text: the inspected text, searched whole (never a prefix).
        call_id: the call, for tool stages.
        scope: where the guardrail was declared.
        budget: CPU seconds the whole check may take (core.policy's clock).

    Returns:
        ALLOW when nothing matches; the rule's decision when a pattern matches; an error
        when the budget ran out or a pattern is not usable (fail closed: the run fails).
    """
    policy = compile_policy((), rule.patterns, origin="guardrail")
    refusal = policy.check(text, budget=budget)
    base = {"call_id": call_id, "scope": scope}
    if refusal is None:
        return Result(rule.name, stage, Decision.ALLOW, **base)
    if refusal.rule == TIMEOUT:
        error = (
            f'pattern "{refusal.pattern}" took longer than {budget * 1000:g} ms of CPU time on this text; '
            "a text that cannot be checked does not pass"
        )
        return Result(rule.name, stage, None, error=error, **base)
    if refusal.rule != "deny":
        return Result(rule.name, stage, None, error=f"the guardrail is not usable: {refusal.message}", **base)
    if rule.on_match == Decision.REPLACE:
        return Result(rule.name, stage, Decision.REPLACE, rule.replacement, **base)
    message = rule.message or f'the {stage} matches the pattern "{refusal.pattern}"'
    return Result(rule.name, stage, Decision.TRIP, message, **base)


# -- model guardrails ---------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A judge model's decision and its message."""

    decision: Decision
    message: str = ""


class VerdictError(ValueError):
    """A judge model's reply is not a verdict."""


def judge_request(prompt: str, stage: Stage, text: str) -> tuple[str, str]:
    """Return (system, user) of a model guardrail's request; the reply schema is VERDICT_SCHEMA.

    The inspected text is quoted as data, cut to JUDGE_TEXT_CHARS characters.
    """
    system = (
        f"{prompt}\n\nYou are a guardrail. Judge the {stage.value.replace('_', ' ')} below and reply "
        'with only a JSON object: {"decision": "allow" | "replace" | "trip", "message": string}. '
        '"allow" lets it pass; "replace" substitutes it with your message; "trip" stops the run, '
        "your message saying why."
    )
    shown = text[:JUDGE_TEXT_CHARS]
    cut = "" if len(shown) == len(text) else f"\n[... {len(text) - len(shown)} more characters not shown ...]"
    user = f"The {stage.value.replace('_', ' ')} to judge, between the markers:\n<<<\n{shown}{cut}\n>>>"
    return system, user


def parse_verdict(reply: str) -> Verdict:
    """Read a judge model's reply as a verdict.

    The reply must be one JSON object with "decision" one of allow/replace/trip and
    "message" a string (absent = ""); "replace" needs a non-empty message. Other keys
    are ignored.

    Raises:
        VerdictError: anything else, saying what was wrong.
    """
    try:
        value = json.loads(reply)
    except (ValueError, RecursionError):
        raise VerdictError(f"the reply is not JSON: {reply[:200]!r}") from None
    if not isinstance(value, dict):
        raise VerdictError(f"the reply is not a JSON object: {reply[:200]!r}")
    decision = value.get("decision")
    if decision not in {d.value for d in Decision}:
        raise VerdictError(
            f'"decision" must be "allow", "replace" or "trip", not {json.dumps(decision)[:100]}'
        )
    message = value.get("message", "")
    if not isinstance(message, str):
        raise VerdictError('"message" must be a string')
    if decision == Decision.REPLACE and not message:
        raise VerdictError('a "replace" verdict needs the replacement as its "message"')
    return Verdict(Decision(decision), message)


def verdict_result(
    name: str, stage: Stage, reply: str, *, call_id: str = "", scope: str = SCOPE_AGENT
) -> Result:
    """Return a model guardrail's result from its reply text (an error when it is no verdict)."""
    try:
        verdict = parse_verdict(reply)
    except VerdictError as exc:
        return Result(
            name,
            stage,
            None,
            error=f"the judge's reply is not a verdict: {exc}",
            call_id=call_id,
            scope=scope,
        )
    return Result(name, stage, verdict.decision, verdict.message, call_id=call_id, scope=scope)
