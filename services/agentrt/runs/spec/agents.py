"""Agent specs: validation, defaults, and the snapshot a run executes (004 §2.3b).

A run never reads a live registered agent: StartRun resolves a *snapshot* — the spec with
its defaults filled in (name, model, instructions, tools) and every catalog tool's spec
copied in — and stores it on the run. Every turn, every replica and every resume reads
that snapshot, so a re-registered agent or a changed catalog never changes a run midway.

Decisions where the contract is silent (see docs/services/runs.md):
- an inline agent may leave `name` empty ("agent"); a registered one may not;
- an agent is offered its `tools` only; `default_tools` adds the built-in workspace tools
  (exec_command, read_file, write_file, list_files) that the tool service offers (a spec
  with no tools has no tools, issue 11);
- the turn contract (handoffs, agent tools, guardrails, output strategies, error handlers,
  sandboxes; issue 11) is validated in full (`runs.validation`); the loop honors all of it;
- a `command_policy` is for the catalog's exec_command only (elsewhere it would be silently
  ignored, so it is refused), and its patterns must compile (004 §2.7j);
- `max_tool_concurrency` 0 is unlimited (004 §2.2), and an AgentTool's `sequential`
  overrides the catalog's (004 §2.7d).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from agentrt.core import agent_tools
from agentrt.core.errors import MeshError, Reason, invalid
from agentrt.core.policy import PatternError, validate_patterns
from agentrt.mesh.durations import MAX_TOOL_TIMEOUT_SECONDS, seconds_of
from agentrt.runs.spec import validation
from agentrt.runs.spec.fields import AGENT_NAME, TOOL_NAME
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

DEFAULT_AGENT_NAME = "agent"
#: Providers the gateway routes (mirrors agentrt.gateway.gateway.KNOWN_PROVIDERS; a unit
#: test keeps the two equal without the run loop importing the gateway).
KNOWN_PROVIDERS = ("local", "openai", "openai-chat", "anthropic")
DEFAULT_TOOLS = ("exec_command", "read_file", "write_file", "list_files")
#: The concurrency of "max_tool_concurrency 0 = unlimited" (004 §2.2): more calls than one
#: response can carry, so the cap never binds (a semaphore of this size is free to make).
UNLIMITED_CONCURRENCY = 1 << 20
#: The one tool a command policy applies to.
EXEC_COMMAND = "exec_command"
DEFAULT_INSTRUCTIONS = (
    "You are an agent working in a workspace directory. Use the tools to inspect and change "
    "files and to run commands, one step at a time. When the task is done, reply with a short "
    "final answer in plain text and call no tool."
)


@dataclass(frozen=True)
class Limits:
    """A run's limits with defaults applied (004 §2.7d, §2.9; AgentLimits).

    Attributes:
        max_turns: turns per run.
        max_error_turns: consecutive all-failed tool turns before failing; -1 = off.
        concurrency: tool calls executing at once (UNLIMITED_CONCURRENCY for "0 = unlimited").
        max_tool_calls: tool calls per run; 0 = unlimited.
        time_budget_s: wall-clock budget in seconds; 0 = none.
        recent_results: results rendered in full (seed 000 window).
        result_max_bytes: cap on one rendered result, bytes.
        max_overflow_retries: context overflows recovered per run (004 §2.5g); 0 = none.
    """

    max_turns: int
    max_error_turns: int
    concurrency: int
    max_tool_calls: int
    time_budget_s: float
    recent_results: int
    result_max_bytes: int
    max_overflow_retries: int = 0


#: Highest max_overflow_retries an agent may ask for.
MAX_OVERFLOW_RETRIES = 100


def limits_of(spec: pb.AgentSpec) -> Limits:
    """Return the spec's limits with the contract's defaults for zero values."""
    lim = spec.limits
    budget = lim.time_budget.seconds + lim.time_budget.nanos / 1e9 if lim.HasField("time_budget") else 0.0
    return Limits(
        max_turns=lim.max_turns or 10,
        max_error_turns=lim.max_consecutive_error_turns or 3,
        concurrency=lim.max_tool_concurrency or UNLIMITED_CONCURRENCY,
        max_tool_calls=lim.max_tool_calls,
        time_budget_s=budget,
        recent_results=spec.recent_results or 6,
        result_max_bytes=spec.result_max_bytes or 16_384,
        max_overflow_retries=spec.max_overflow_retries,
    )


def parse_model(text: str) -> cpb.ModelRef:
    """Parse "provider:model" (or "provider") into a ModelRef."""
    provider, _, model = text.partition(":")
    return cpb.ModelRef(provider=provider.strip(), model=model.strip())


def _json_object(text: str, field: str) -> None:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise invalid(Reason.INVALID_JSON, f"{field} is not valid JSON: {exc}", field=field) from exc
    if not isinstance(value, dict):
        raise invalid(Reason.INVALID_JSON, f"{field} must be a JSON object", field=field)


def validate_agent(spec: pb.AgentSpec, *, require_name: bool, field: str = "agent") -> None:
    """Check a spec; change nothing.

    Raises:
        MeshError: INVALID_ARGUMENT with INVALID_AGENT (bad or missing name, bad or
            duplicate tool name, unknown model provider), INVALID_JSON (an output schema or
            a tool's parameter schema not a JSON object), INVALID_VALUE (negative limits or
            timeouts, a spec on a catalog tool, temperature outside 0..2 or top_p outside
            0..1 or not finite, max_output_tokens <= 0, a NAMED tool choice without a name
            or naming none of the agent's tools, an enum number outside its enum); metadata
            field names the offending field. The turn contract's own errors
            (runs.validation: INVALID_SCHEMA, UNSUPPORTED_CAPABILITY, MISSING_FIELD, ...).
    """
    if spec.name or require_name:
        if not AGENT_NAME.match(spec.name):
            raise invalid(
                Reason.INVALID_AGENT, f"{field}.name must match [a-zA-Z0-9_.-]{{1,64}}", field=f"{field}.name"
            )
    if spec.output_json_schema:
        _json_object(spec.output_json_schema, f"{field}.output_json_schema")
    seen: set[str] = set()
    for i, tool in enumerate(spec.tools):
        where = f"{field}.tools[{i}]"
        if not TOOL_NAME.match(tool.name):
            raise invalid(Reason.INVALID_AGENT, f"{where}.name must match [a-zA-Z0-9_-]{{1,64}}", field=where)
        if tool.name in seen:
            raise invalid(Reason.INVALID_AGENT, f"tool {tool.name!r} is listed twice", field=where)
        seen.add(tool.name)
        if tool.HasField("spec"):
            if not tool.spec.external:
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"{where}.spec is only for client-declared tools (external = true)",
                    field=where,
                )
            if tool.spec.name and tool.spec.name != tool.name:
                raise invalid(
                    Reason.INVALID_VALUE, f"{where}.spec.name differs from {where}.name", field=where
                )
            if tool.spec.parameters_json_schema:
                _json_object(tool.spec.parameters_json_schema, f"{where}.spec.parameters_json_schema")
        _validate_command_policy(tool, where)
    lim = spec.limits
    for name in ("max_turns", "max_tool_concurrency", "max_tool_calls"):
        if getattr(lim, name) < 0:
            raise invalid(
                Reason.INVALID_VALUE, f"{field}.limits.{name} must be >= 0", field=f"{field}.limits.{name}"
            )
    if lim.max_consecutive_error_turns < -1:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.limits.max_consecutive_error_turns must be >= -1",
            field=f"{field}.limits.max_consecutive_error_turns",
        )
    if lim.HasField("time_budget"):
        seconds_of(lim.time_budget, f"{field}.limits.time_budget")
    for name in ("recent_results", "result_max_bytes"):
        if getattr(spec, name) < 0:
            raise invalid(Reason.INVALID_VALUE, f"{field}.{name} must be >= 0", field=f"{field}.{name}")
    _validate_model(spec, field)
    _validate_enums(spec, field)
    _validate_compaction(spec, field)
    validation.validate_contract(
        spec, field, implicit_tools=implicit_tools(spec), known_providers=KNOWN_PROVIDERS
    )


def _validate_compaction(spec: pb.AgentSpec, field: str) -> None:
    """Refuse a compaction policy or overflow budget the run could not honour (004 §2.5f, §2.5g)."""
    if not 0 <= spec.max_overflow_retries <= MAX_OVERFLOW_RETRIES:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.max_overflow_retries must be 0..{MAX_OVERFLOW_RETRIES}",
            field=f"{field}.max_overflow_retries",
        )
    if not spec.HasField("compaction"):
        return
    policy = spec.compaction
    for name in (
        "context_window_tokens",
        "trigger_input_tokens",
        "trigger_turns",
        "keep_turns",
        "summary_max_output_tokens",
    ):
        if getattr(policy, name) < 0:
            raise invalid(
                Reason.INVALID_VALUE,
                f"{field}.compaction.{name} must be >= 0",
                field=f"{field}.compaction.{name}",
            )
    model = policy.summary_model
    if model.provider and model.provider not in KNOWN_PROVIDERS:
        raise invalid(
            Reason.INVALID_AGENT,
            f"{field}.compaction.summary_model.provider {model.provider!r} is not one of "
            f"{', '.join(KNOWN_PROVIDERS)}",
            field=f"{field}.compaction.summary_model.provider",
        )


def _validate_command_policy(tool: pb.AgentTool, where: str) -> None:
    """Refuse a command policy off exec_command, or one with a pattern that does not compile."""
    policy = tool.command_policy
    if not policy.allow and not policy.deny:
        return
    if tool.name != EXEC_COMMAND or tool.spec.external:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{where}.command_policy applies to the exec_command tool only, not {tool.name!r}",
            field=f"{where}.command_policy",
        )
    try:
        validate_patterns(policy.allow, policy.deny)
    except PatternError as exc:
        raise invalid(
            Reason.INVALID_VALUE,
            f"tool {tool.name!r}: {where}.command_policy.{exc}",
            field=f"{where}.command_policy.{exc.field}",
            pattern=exc.pattern,
        ) from None


def _validate_model(spec: pb.AgentSpec, field: str) -> None:
    """Refuse a model or settings the gateway would refuse on the first turn."""
    if spec.model.provider and spec.model.provider not in KNOWN_PROVIDERS:
        raise invalid(
            Reason.INVALID_AGENT,
            f"{field}.model.provider {spec.model.provider!r} is not one of {', '.join(KNOWN_PROVIDERS)}",
            field=f"{field}.model.provider",
        )
    settings = spec.settings
    for name, high in (("temperature", 2.0), ("top_p", 1.0)):
        if settings.HasField(name):
            value = getattr(settings, name)
            if not math.isfinite(value) or not 0.0 <= value <= high:
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"{field}.settings.{name} must be a number from 0 to {high:g}",
                    field=f"{field}.settings.{name}",
                )
    if settings.HasField("max_output_tokens") and settings.max_output_tokens <= 0:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.settings.max_output_tokens must be > 0",
            field=f"{field}.settings.max_output_tokens",
        )
    if settings.output_json_schema:
        _json_object(settings.output_json_schema, f"{field}.settings.output_json_schema")
    choice = settings.tool_choice
    if choice.mode not in cpb.ToolChoiceMode.values():
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.settings.tool_choice.mode {choice.mode} is not a ToolChoiceMode",
            field=f"{field}.settings.tool_choice.mode",
        )
    if choice.mode == cpb.TOOL_CHOICE_MODE_NAMED:
        if not choice.name:
            raise invalid(
                Reason.INVALID_VALUE,
                f"{field}.settings.tool_choice.name is required when its mode is NAMED",
                field=f"{field}.settings.tool_choice.name",
            )
        # With default_tools `snapshot` checks the name against the catalog's defaults too.
        if not spec.default_tools and choice.name not in {t.name for t in spec.tools}:
            raise _unknown_choice(choice.name, field)


def _unknown_choice(name: str, field: str) -> MeshError:
    return invalid(
        Reason.INVALID_VALUE,
        f"{field}.settings.tool_choice.name {name!r} is not one of the agent's tools",
        field=f"{field}.settings.tool_choice.name",
    )


def _validate_enums(spec: pb.AgentSpec, field: str) -> None:
    """Refuse enum numbers outside their enums (an old or foreign client's), and bad timeouts."""
    if spec.tool_call_mode not in pb.ToolCallMode.values():
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.tool_call_mode {spec.tool_call_mode} is not a ToolCallMode",
            field=f"{field}.tool_call_mode",
        )
    for i, tool in enumerate(spec.tools):
        where = f"{field}.tools[{i}]"
        # Durations: well formed, not negative, a tool's at most a day (mesh.durations).
        if tool.HasField("timeout"):
            seconds_of(tool.timeout, f"{where}.timeout", max_seconds=MAX_TOOL_TIMEOUT_SECONDS)
        if tool.spec.HasField("timeout"):
            seconds_of(tool.spec.timeout, f"{where}.spec.timeout", max_seconds=MAX_TOOL_TIMEOUT_SECONDS)


def snapshot(spec: pb.AgentSpec, default_model: str, catalog: Mapping[str, cpb.ToolSpec]) -> pb.AgentSpec:
    """Return the run's snapshot of spec: defaults filled in, catalog tool specs copied in.

    Args:
        spec: a validated spec.
        default_model: "provider:model" for a spec that names no provider.
        catalog: the tool service's catalog by name.

    Raises:
        MeshError: INVALID_ARGUMENT/UNKNOWN_TOOL for a tool that is neither in the catalog
            nor client-declared; INVALID_ARGUMENT/INVALID_VALUE for a NAMED tool choice
            that names none of the snapshot's tools; INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY
            for output_strategy NATIVE where the resolved provider cannot combine it with
            the tools (validation.validate_snapshot).
    """
    snap = pb.AgentSpec()
    snap.CopyFrom(spec)
    snap.name = snap.name or DEFAULT_AGENT_NAME
    if not snap.model.provider:
        default = parse_model(default_model)
        snap.model.provider = default.provider
        snap.model.model = snap.model.model or default.model
    snap.instructions = snap.instructions or DEFAULT_INSTRUCTIONS
    snap.tools.extend(pb.AgentTool(name=n) for n in implicit_tools(snap) if n in catalog)
    for i, tool in enumerate(snap.tools):
        if tool.HasField("spec") and tool.spec.external:
            tool.spec.name = tool.name
            continue
        if tool.agent_name:
            tool.spec.CopyFrom(agent_tool_spec(tool))
            continue
        found = catalog.get(tool.name)
        if found is None:
            raise invalid(
                Reason.UNKNOWN_TOOL,
                f"tool {tool.name!r} is not in the tool service's catalog",
                field=f"agent.tools[{i}].name",
            )
        tool.spec.CopyFrom(found)
    choice = snap.settings.tool_choice
    if choice.mode == cpb.TOOL_CHOICE_MODE_NAMED and choice.name not in {t.name for t in snap.tools}:
        raise _unknown_choice(choice.name, "agent")
    validation.validate_snapshot(snap)
    return snap


def implicit_tools(spec: pb.AgentSpec) -> tuple[str, ...]:
    """Return the default tools a spec asks for (`default_tools`) that it does not list itself."""
    if not spec.default_tools:
        return ()
    listed = {t.name for t in spec.tools}
    return tuple(n for n in DEFAULT_TOOLS if n not in listed)


def agent_tool_spec(tool: pb.AgentTool) -> cpb.ToolSpec:
    """Return the ToolSpec an agent tool is offered as (004 §2.8): {"input": string}, not read-only."""
    return cpb.ToolSpec(
        name=tool.name,
        description=tool.description or agent_tools.default_description(tool.agent_name),
        parameters_json_schema=json.dumps(agent_tools.PARAMETERS),
    )


def offered_specs(snap: pb.AgentSpec) -> list[cpb.ToolSpec]:
    """Return the tool specs the model is offered, with the agent's overrides applied.

    Overrides: needs_approval, timeout, sequential (004 §2.7d).
    """
    out = []
    for tool in snap.tools:
        spec = cpb.ToolSpec()
        spec.CopyFrom(tool.spec)
        if tool.HasField("needs_approval"):
            spec.needs_approval = tool.needs_approval
        if tool.HasField("timeout"):
            spec.timeout.CopyFrom(tool.timeout)
        if tool.HasField("sequential"):
            spec.sequential = tool.sequential
        out.append(spec)
    return out


def command_policies(snap: pb.AgentSpec) -> dict[str, cpb.CommandPolicy]:
    """Return the command policies of a snapshot's tools by tool name (004 §2.7j).

    Only the catalog's exec_command carries one (`validate_agent` refuses it elsewhere);
    tools without patterns are left out.
    """
    return {
        t.name: t.command_policy
        for t in snap.tools
        if (t.command_policy.allow or t.command_policy.deny) and not t.spec.external
    }
