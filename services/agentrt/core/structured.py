"""Structured final output on every provider (004 §2.3; 002 "Recovering a Rejected Model Answer").

An agent with an output schema gets its final output one of two ways (decision 0006):

- NATIVE: the provider's response format (ModelSettings.output_json_schema); the answer's
  text is the output.
- TOOL: a synthesized tool `FINAL_OUTPUT_TOOL` whose parameters are the schema (wrapped as
  {"output": <schema>} when its root is not an object, since tool parameters must be an
  object); the call's arguments are the output. AUTO picks it only where a provider cannot
  combine tools with a response format (`PROVIDERS_WITHOUT_TOOLS_AND_FORMAT`) on a turn
  that offers tools; a tool-free turn (the recovery turn, the closing turn of
  final_turn_without_tools) always goes NATIVE, which every provider can do.

`judge()` decides a turn that has no remaining tool work (004 §2.3):

- a refusal wins over any text or structured content: REFUSAL;
- no schema: the text is the final output (possibly empty): FINAL;
- with a schema, the candidate (the output call's arguments, else the text) is parsed and
  validated against the whole schema; valid: FINAL with the value;
- no candidate at all (an empty structured turn): the invalid-output handler's fallback
  when one is declared, else CONTINUE (never a hard failure);
- invalid: one tool-free RECOVER turn carrying the problem with its JSON pointer
  (`recovery_text`), and when that answer is invalid too, the fallback, else FAIL with
  kind KIND_INVALID_FINAL_OUTPUT.

A final_output call alongside other calls is not taken: it is answered with `MIXED_TEXT`
once the others ran (the answer could not have read their results). Of several
final_output calls the first is taken, the others answered with `DUPLICATE_TEXT`.
Pure: the schema's validator is passed in (`core.tool_args.Validate`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt.core.decide import Call
from agentrt.core.tool_args import SchemaProblem, Validate

#: The synthesized tool of the TOOL strategy.
FINAL_OUTPUT_TOOL = "final_output"
#: The property holding a non-object output inside the tool's arguments.
WRAP_KEY = "output"
#: Providers (ModelRef.provider) that cannot combine tools with a response format: the
#: OpenAI Responses adapter refuses the pair (gateway/providers/openai_responses.py; 002 "Provider
#: Capability Differences": "Tools and structured output cannot be combined").
PROVIDERS_WITHOUT_TOOLS_AND_FORMAT = frozenset({"openai"})
#: Failure kind of a final output that never matched its schema.
KIND_INVALID_FINAL_OUTPUT = "invalid_final_output"
#: The result of the final_output call once accepted.
ACCEPTED_TEXT = "Final output accepted."
#: The result of a final_output call made alongside other tool calls.
MIXED_TEXT = (
    "The final output was not accepted: it must be given alone, after the results of your other "
    "calls. Read those results, then call final_output again by itself."
)
#: The result of a further final_output call of the same reply.
DUPLICATE_TEXT = "Ignored: only the first final_output call of a reply is taken."


class Strategy(enum.StrEnum):
    """How the final output is asked for on one turn."""

    NATIVE = "native"
    TOOL = "tool"


class Requested(enum.StrEnum):
    """The agent's OutputStrategy."""

    AUTO = "auto"
    NATIVE = "native"
    TOOL = "tool"


def choose_strategy(requested: Requested, provider: str, *, offers_tools: bool) -> Strategy:
    """Return the strategy of one turn of an agent with an output schema.

    Args:
        requested: the agent's output strategy.
        provider: the model's provider key ("openai", "anthropic", ...).
        offers_tools: the turn offers the model tools or handoffs (a tool-free turn does not).
    """
    if not offers_tools:
        return Strategy.NATIVE
    if requested == Requested.TOOL:
        return Strategy.TOOL
    if requested == Requested.AUTO and provider in PROVIDERS_WITHOUT_TOOLS_AND_FORMAT:
        return Strategy.TOOL
    return Strategy.NATIVE


def native_conflict(requested: Requested, provider: str, *, has_tools: bool) -> bool:
    """True when NATIVE was asked for on a provider that cannot combine it with the agent's tools."""
    return requested == Requested.NATIVE and has_tools and provider in PROVIDERS_WITHOUT_TOOLS_AND_FORMAT


def wraps(schema: Mapping[str, Any]) -> bool:
    """True when the schema's root is not an object, so the tool wraps it in {"output": ...}."""
    kind = schema.get("type")
    return not (kind == "object" or kind == ["object"] or (kind is None and "properties" in schema))


@dataclass(frozen=True)
class OutputTool:
    """The synthesized final-output tool of a schema.

    Attributes:
        name: FINAL_OUTPUT_TOOL.
        description: what the model reads.
        parameters: the tool's parameters schema (the output schema, or its wrapper).
        wrapped: the output is the arguments' WRAP_KEY property.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    wrapped: bool


def output_tool(schema: Mapping[str, Any]) -> OutputTool:
    """Return the final-output tool of an output schema."""
    description = (
        "Give your final answer by calling this tool exactly once, alone, when the task is done: "
        "its arguments are the answer, matching the schema. Do not call it before you are done."
    )
    if wraps(schema):
        parameters = {
            "type": "object",
            "properties": {WRAP_KEY: dict(schema)},
            "required": [WRAP_KEY],
            "additionalProperties": False,
        }
        return OutputTool(FINAL_OUTPUT_TOOL, description, parameters, True)
    return OutputTool(FINAL_OUTPUT_TOOL, description, dict(schema), False)


class Kind(enum.StrEnum):
    """What a turn with no remaining tool work becomes."""

    FINAL = "final"
    CONTINUE = "continue"
    RECOVER = "recover"
    FAIL = "fail"
    REFUSAL = "refusal"


@dataclass(frozen=True)
class Outcome:
    """The judgement of a turn's final output.

    Attributes:
        kind: what the turn becomes.
        output: FINAL: the final output text (the model's text, the output call's value as
            JSON, or the fallback); "" otherwise.
        fallback: FINAL came from the invalid-output handler's fallback message.
        problem: RECOVER/FAIL: the first schema problem (JSON pointer and message).
        recovery_text: RECOVER: the user message of the tool-free recovery turn.
    """

    kind: Kind
    output: str = ""
    fallback: bool = False
    problem: SchemaProblem | None = None
    recovery_text: str = ""

    def failure_details(self) -> dict[str, str]:
        """Return FailureInfo.details_json's facts of a FAIL: pointer and error."""
        p = self.problem or SchemaProblem("", "")
        return {"pointer": p.pointer, "error": p.message}


def recovery_text(problem: SchemaProblem) -> str:
    """Return the recovery turn's user message (002 "Recovering a Rejected Model Answer")."""
    return (
        f"Your final answer does not match the required output schema: {problem.describe()}. "
        "Reply again with only the corrected answer as JSON matching the schema, and nothing else."
    )


def candidate(text: str, output_calls: Sequence[Call], *, wrapped: bool) -> str | None:
    """Return the JSON text to judge: the first output call's value, else the answer text.

    None when there is neither (an empty structured turn). A wrapped call's value is its
    WRAP_KEY property, re-encoded; when it lacks the key the call's text is judged as is.
    """
    if output_calls:
        args = output_calls[0].arguments or output_calls[0].invalid_arguments
        if wrapped:
            try:
                value = json.loads(args)
            except ValueError:
                return args
            if isinstance(value, dict) and WRAP_KEY in value:
                return json.dumps(value[WRAP_KEY], ensure_ascii=False)
        return args
    return text if text.strip() else None


def judge(
    *,
    text: str,
    refusal: str = "",
    schema_set: bool,
    validate: Validate | None,
    output_calls: Sequence[Call] = (),
    wrapped: bool = False,
    recovery_used: bool = False,
    fallback: str | None = None,
) -> Outcome:
    """Decide a turn with no remaining tool work (see the module docstring; 004 §2.3).

    Args:
        text: the turn's answer text (joined text blocks).
        refusal: the refusal text when the model refused ("" = none).
        schema_set: the agent has an output schema.
        validate: that schema's validator; None = the JSON is only parsed (004 §2.7h: a
            schema that cannot be compiled is not enforced).
        output_calls: the turn's final_output calls in call order (TOOL strategy), when
            they came alone.
        wrapped: the output tool wraps the schema (`wraps`).
        recovery_used: the run already spent its recovery turn (the run log says so).
        fallback: the invalid-output handler's fallback message; None = no FALLBACK handler.

    Returns:
        The outcome. A FINAL output is the exact candidate text that validated.
    """
    if refusal:
        return Outcome(Kind.REFUSAL)
    if not schema_set:
        return Outcome(Kind.FINAL, text)
    found = candidate(text, output_calls, wrapped=wrapped)
    if found is None:
        if fallback is not None:
            return Outcome(Kind.FINAL, fallback, fallback=True)
        return Outcome(Kind.CONTINUE)
    problem = _problem(found, validate)
    if problem is None:
        return Outcome(Kind.FINAL, found)
    if not recovery_used:
        return Outcome(Kind.RECOVER, problem=problem, recovery_text=recovery_text(problem))
    if fallback is not None:
        return Outcome(Kind.FINAL, fallback, fallback=True, problem=problem)
    return Outcome(Kind.FAIL, problem=problem)


def _problem(found: str, validate: Validate | None) -> SchemaProblem | None:
    try:
        value = json.loads(found)
    except (ValueError, RecursionError) as exc:
        return SchemaProblem("", f"the answer is not valid JSON ({exc})")
    if validate is None:
        return None
    problems = validate(value)
    return problems[0] if problems else None


@dataclass(frozen=True)
class OutputCalls:
    """How a TOOL-strategy response's final_output calls are handled.

    Attributes:
        taken: the calls `judge` reads (the first one, when the response had no other call).
        answers: (call, result text) for every other final_output call, in call order.
    """

    taken: tuple[Call, ...]
    answers: tuple[tuple[Call, str], ...]


def split_output_calls(calls: Sequence[Call]) -> OutputCalls:
    """Split a response's calls: which final_output call is taken, and what the others get.

    With any other call in the response none is taken (each answered MIXED_TEXT); alone,
    the first is taken and the rest are answered DUPLICATE_TEXT.
    """
    outs = [c for c in calls if c.name == FINAL_OUTPUT_TOOL]
    if not outs:
        return OutputCalls((), ())
    if len(outs) < len(calls):
        return OutputCalls((), tuple((c, MIXED_TEXT) for c in outs))
    return OutputCalls((outs[0],), tuple((c, DUPLICATE_TEXT) for c in outs[1:]))
