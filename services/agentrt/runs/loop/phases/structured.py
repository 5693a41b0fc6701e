"""Structured output in the run loop (004 §2.3; 002 "Recovering a Rejected Model Answer").

The pure rules are `core/structured.py` (decision 0006); this module applies them to a
run's snapshot and a turn's decision, still without I/O:

- `shape_of`: what one turn offers. The snapshot's tools and handoffs; with an output schema the
  turn's strategy (`choose_strategy`): NATIVE sets the response format, TOOL adds the
  synthesized `final_output` tool instead. A tool-free turn (the recovery turn, the
  closing call) offers no tool the model may call and is always NATIVE: on a provider
  that cannot combine tools with a format the tools are left out, elsewhere they stay
  declared with tool_choice NONE (a conversation holding tool calls stays well formed
  for providers that require their tools declared).
- `judge_turn`: what a turn with no remaining tool work becomes: a final output, a
  recovery turn, a failure (`invalid_final_output`), or nothing special (the loop goes on).
  Output-tool calls get their results here ("Final output accepted.", the problem text,
  or the "call it alone"/"ignored" answers), so the session never holds a call without
  its result (004 §2.5).

Which turn is tool-free and whether the recovery turn was spent are run state
(`Run.state`: `tool_free_turn`, `recovery_used`), written at the save point that decided
them, so a takeover shapes and judges the same turn the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agentrt.core import structured
from agentrt.core.decide import Call, Decision, DecisionKind
from agentrt.runs.loop.phases import disclosure as disclosure_phase
from agentrt.runs.loop.phases import handoff as handoff_phase
from agentrt.runs.loop.phases.tools import runtime_result
from agentrt.runs.spec import schemas, validation
from agentrt.runs.spec.agents import offered_specs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: The state keys this module's decisions live under (RunRecord.state).
TOOL_FREE_TURN, RECOVERY_USED = "tool_free_turn", "recovery_used"


@dataclass(frozen=True)
class TurnShape:
    """What one turn offers the model.

    Attributes:
        tools: the tool specs sent with the request (may include `final_output`).
        strategy: the output strategy of the turn; None = the agent has no output schema.
        wrapped: the final-output tool wraps a non-object schema in {"output": ...}.
        tool_free: the model may call no tool on this turn (tool_choice NONE or no tools).
        response_format: the schema text to send as the response format ("" = none).
    """

    tools: list[cpb.ToolSpec]
    strategy: structured.Strategy | None = None
    wrapped: bool = False
    tool_free: bool = False
    response_format: str = ""


def shape_of(
    snap: pb.AgentSpec, *, tool_free: bool = False, state: dict[str, object] | None = None
) -> TurnShape:
    """Return the shape of a turn of the snapshot (see the module docstring).

    `state` (the run's) says which deferred tools were disclosed (runs/loop/phases/disclosure.py);
    None = every tool is shown.
    """
    tools = offered_specs(snap) if state is None else disclosure_phase.visible(snap, state)
    offered = tools + handoff_phase.offered(snap)
    schema_text = snap.output_json_schema
    if tool_free:
        keep = not (schema_text and snap.model.provider in structured.PROVIDERS_WITHOUT_TOOLS_AND_FORMAT)
        native = structured.Strategy.NATIVE if schema_text else None
        return TurnShape(offered if keep else [], native, tool_free=True, response_format=schema_text)
    if not schema_text:
        return TurnShape(offered)
    strategy = structured.choose_strategy(
        validation.requested_strategy(snap), snap.model.provider, offers_tools=bool(offered)
    )
    if strategy == structured.Strategy.NATIVE:
        return TurnShape(offered, strategy, response_format=schema_text)
    tool = structured.output_tool(json.loads(schema_text))
    spec = cpb.ToolSpec(
        name=tool.name, description=tool.description, parameters_json_schema=json.dumps(tool.parameters)
    )
    return TurnShape([*offered, spec], strategy, wrapped=tool.wrapped)


def tool_free_turn(state: dict[str, object], turn: int) -> bool:
    """True when the run's state marks `turn` as tool-free (a recovery turn)."""
    return state.get(TOOL_FREE_TURN) == turn


@dataclass
class Verdict:
    """What a judged turn becomes.

    Attributes:
        kind: FINAL, RECOVER or FAIL (`core.structured.Kind`); a turn that goes on as
            usual has no verdict.
        output: FINAL: the final output text.
        results: the results of the turn's calls when they are all output-tool calls (in
            call order), else empty.
        recovery_text: RECOVER: the problem, said to the model (as the output call's
            result, or as a user message after a text answer).
        failure_details: FAIL: {"pointer", "error"} for FailureInfo.details_json.
    """

    kind: structured.Kind
    output: str = ""
    results: list[cpb.ToolResult] = field(default_factory=list)
    recovery_text: str = ""
    failure_details: dict[str, str] = field(default_factory=dict)


def _result(call: Call, text: str, *, error: bool) -> cpb.ToolResult:
    status = cpb.TOOL_RESULT_STATUS_ERROR if error else cpb.TOOL_RESULT_STATUS_OK
    return runtime_result(call, text, status, is_error=error)


def preanswered(shape: TurnShape, decision: Decision) -> dict[str, cpb.ToolResult]:
    """Return the results of output-tool calls made alongside other calls (MIXED_TEXT), by call id.

    Empty unless the turn used the TOOL strategy and the response mixed final_output with
    other calls; the other calls run through the tool phase as usual.
    """
    if shape.strategy != structured.Strategy.TOOL or not decision.calls:
        return {}
    split = structured.split_output_calls(decision.calls)
    if split.taken:
        return {}
    return {c.call_id: _result(c, text, error=True) for c, text in split.answers}


def judge_turn(
    snap: pb.AgentSpec,
    shape: TurnShape,
    decision: Decision,
    *,
    recovery_used: bool,
    fallback: str | None = None,
) -> Verdict | None:
    """Judge a turn's answer against the agent's output schema (004 §2.3); pure.

    Returns:
        None when the turn goes on as the loop already handles it: tool calls to run
        (without a lone final_output call), an empty or truncated reply (the next render
        nudges it: an empty structured turn continues), or a plain-text final answer of an
        agent without a schema (FINAL is returned for it, verbatim). Otherwise the verdict.
        A refusal is the loop's own (it wins before this is asked). `fallback` is the
        invalid-final-output handler's message (None = no FALLBACK handler): an empty
        structured turn, or an answer still invalid after the recovery turn, completes
        with it (FINAL).
    """
    schema_text = snap.output_json_schema
    output_calls: tuple[Call, ...] = ()
    results: list[cpb.ToolResult] = []
    if decision.kind == DecisionKind.TOOL_CALLS:
        if shape.strategy != structured.Strategy.TOOL:
            return None
        split = structured.split_output_calls(decision.calls)
        if not split.taken:
            return None
        output_calls = split.taken
        results = [_result(c, text, error=False) for c, text in split.answers]
        text = ""
    elif decision.kind == DecisionKind.FINAL:
        text = decision.final_output
    else:
        return None
    outcome = structured.judge(
        text=text,
        schema_set=bool(schema_text),
        validate=schemas.validator(schema_text) if schema_text else None,
        output_calls=output_calls,
        wrapped=shape.wrapped,
        recovery_used=recovery_used,
        fallback=fallback,
    )
    if outcome.kind == structured.Kind.CONTINUE:
        return None
    taken_text = {
        structured.Kind.FINAL: structured.ACCEPTED_TEXT,
        structured.Kind.RECOVER: outcome.recovery_text,
    }.get(outcome.kind, _failed_text(outcome))
    if outcome.fallback and outcome.problem is not None:
        taken_text = _failed_text(outcome).replace("The run ends here.", "A fallback answer was used.")
    if output_calls:
        error = outcome.kind != structured.Kind.FINAL or outcome.fallback
        results.insert(0, _result(output_calls[0], taken_text, error=error))
    return Verdict(
        outcome.kind,
        output=outcome.output,
        results=results,
        recovery_text=outcome.recovery_text,
        failure_details=outcome.failure_details() if outcome.kind == structured.Kind.FAIL else {},
    )


def _failed_text(outcome: structured.Outcome) -> str:
    problem = outcome.problem.describe() if outcome.problem else "it did not match"
    return f"The final output was rejected: {problem}. The run ends here."
