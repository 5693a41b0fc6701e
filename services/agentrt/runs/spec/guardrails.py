"""Checks of the guardrails a spec declares (004 §2.6): pure, at RegisterAgent and StartRun.

`validate_guardrails` is called by `validation.validate_contract` for the agent's guardrails
and for each tool's (tool_scope: tool_input and tool_output stages only). It checks, changing
nothing: at most MAX_GUARDRAILS; names (the agent-name pattern) distinct; stages and input
mode; exactly one kind; pattern guardrails' patterns compile under the command policy's
rules (`core.policy`, reused through `core.guardrails.check_pattern_rule`), with on_match,
replacement and message consistent; model guardrails' prompt, model and max_output_tokens.

Errors are INVALID_ARGUMENT with metadata `field` = the path (e.g.
`agent.guardrails[0].pattern.patterns[2]`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrt.core.errors import Reason, missing
from agentrt.core.guardrails import PatternRule, check_pattern_rule
from agentrt.core.policy import PatternError
from agentrt.runs.spec.fields import AGENT_NAME, bad
from agentrt.v1 import run_service_pb2 as pb

MAX_GUARDRAILS = 16
MAX_PROMPT = 16384
MAX_JUDGE_TOKENS = 8192
MAX_REPLACEMENT = 65536
MAX_TRIP_MESSAGE = 1024
TOOL_STAGES = (pb.GUARDRAIL_STAGE_TOOL_INPUT, pb.GUARDRAIL_STAGE_TOOL_OUTPUT)


def validate_guardrails(
    guardrails: Sequence[pb.Guardrail], where: str, known_providers: Sequence[str], *, tool_scope: bool
) -> None:
    """Check an agent's (or, with tool_scope, a tool's) guardrails (see the module docstring).

    Args:
        guardrails: the declared guardrails, in order.
        where: their path in the request ("agent.guardrails", "agent.tools[0].guardrails").
        known_providers: model providers the gateway routes (a model guardrail's provider).
        tool_scope: a tool's guardrails: stages tool_input and tool_output only.

    Raises:
        MeshError: INVALID_ARGUMENT with INVALID_VALUE, MISSING_FIELD or INVALID_AGENT (a
            model guardrail's unknown provider); metadata `field` (and `pattern` for a pattern
            that does not compile).
    """
    if len(guardrails) > MAX_GUARDRAILS:
        raise bad(f"{len(guardrails)} guardrails, more than {MAX_GUARDRAILS}", where)
    seen: set[str] = set()
    for i, g in enumerate(guardrails):
        at = f"{where}[{i}]"
        if not AGENT_NAME.match(g.name):
            raise bad(f"{at}.name must match [a-zA-Z0-9_.-]{{1,64}}", f"{at}.name")
        if g.name in seen:
            raise bad(f"guardrail {g.name!r} is declared twice", f"{at}.name")
        seen.add(g.name)
        _stages(g, at, tool_scope)
        kind = g.WhichOneof("kind")
        if kind is None:
            raise missing(f"{at}.kind")
        if kind == "pattern":
            _pattern(g, f"{at}.pattern")
        else:
            _model_guardrail(g.model, f"{at}.model", known_providers)


def _stages(g: pb.Guardrail, at: str, tool_scope: bool) -> None:
    if not g.stages:
        raise missing(f"{at}.stages")
    if len(set(g.stages)) != len(g.stages):
        raise bad(f"{at}.stages names a stage twice", f"{at}.stages")
    for j, stage in enumerate(g.stages):
        if stage == pb.GUARDRAIL_STAGE_UNSPECIFIED or stage not in pb.GuardrailStage.values():
            raise bad(f"{at}.stages[{j}] {stage} is not a GuardrailStage", f"{at}.stages[{j}]")
        if tool_scope and stage not in TOOL_STAGES:
            raise bad(
                f"{at}.stages[{j}]: a tool's guardrails inspect tool_input and tool_output only",
                f"{at}.stages[{j}]",
            )
    if g.input_mode not in pb.GuardrailInputMode.values():
        raise bad(f"{at}.input_mode {g.input_mode} is not a GuardrailInputMode", f"{at}.input_mode")
    if g.input_mode and pb.GUARDRAIL_STAGE_INPUT not in g.stages:
        raise bad(f"{at}.input_mode is for the input stage only", f"{at}.input_mode")


def _pattern(g: pb.Guardrail, at: str) -> None:
    p = g.pattern
    if not p.patterns:
        raise missing(f"{at}.patterns")
    if p.on_match not in (
        pb.GUARDRAIL_DECISION_UNSPECIFIED,
        pb.GUARDRAIL_DECISION_TRIP,
        pb.GUARDRAIL_DECISION_REPLACE,
    ):
        raise bad(f"{at}.on_match must be TRIP or REPLACE", f"{at}.on_match")
    try:
        check_pattern_rule(PatternRule(g.name, tuple(p.patterns)))
    except PatternError as exc:
        path = f"{at}.patterns" if exc.index < 0 else f"{at}.patterns[{exc.index}]"
        detail = exc.error if exc.index < 0 else f'pattern "{exc.pattern}": {exc.error}'
        raise bad(f"guardrail {g.name!r}: {path}: {detail}", path, pattern=exc.pattern) from None
    if p.on_match == pb.GUARDRAIL_DECISION_REPLACE:
        if not p.replacement:
            raise missing(f"{at}.replacement")
        if len(p.replacement) > MAX_REPLACEMENT:
            raise bad(f"{at}.replacement is longer than {MAX_REPLACEMENT} characters", f"{at}.replacement")
        if p.message:
            raise bad(f"{at}.message is for TRIP (a REPLACE's text is its replacement)", f"{at}.message")
    else:
        if p.replacement:
            raise bad(f"{at}.replacement is for on_match REPLACE", f"{at}.replacement")
        if len(p.message) > MAX_TRIP_MESSAGE:
            raise bad(f"{at}.message is longer than {MAX_TRIP_MESSAGE} characters", f"{at}.message")


def _model_guardrail(m: pb.ModelGuardrail, at: str, known_providers: Sequence[str]) -> None:
    if not m.prompt.strip():
        raise missing(f"{at}.prompt")
    if len(m.prompt) > MAX_PROMPT:
        raise bad(f"{at}.prompt is longer than {MAX_PROMPT} characters", f"{at}.prompt")
    if m.model.provider and m.model.provider not in known_providers:
        raise bad(
            f"{at}.model.provider {m.model.provider!r} is not one of {', '.join(known_providers)}",
            f"{at}.model.provider",
            Reason.INVALID_AGENT,
        )
    if not 0 <= m.max_output_tokens <= MAX_JUDGE_TOKENS:
        raise bad(f"{at}.max_output_tokens must be 0..{MAX_JUDGE_TOKENS}", f"{at}.max_output_tokens")
