"""Checks of the turn contract's spec fields (issue 11): pure, at RegisterAgent and StartRun.

`validate_contract` is called by `agents.validate_agent` on every spec (inline, registered,
or a registered one again at StartRun). It checks, changing nothing:

- schemas (004 §2.7h): the output schema, a settings output schema, client tools'
  parameters and handoffs' input schemas pass their meta-schema (INVALID_SCHEMA);
- handoffs (004 §2.4): `handoffs` names and `handoff_targets` well formed, no target twice,
  no handoff to the agent itself, tool names distinct from the agent's tools, at most 32;
- agent tools (004 §2.8): agent name and version, no `spec` or command policy;
- guardrails (004 §2.6): runs/spec/guardrails.py;
- the output strategy, error handlers (a fallback of a structured agent matches its
  schema), and a run sandbox (as ToolService.CreateSandbox would check it).

Errors are INVALID_ARGUMENT with metadata `field` = the path (e.g.
`agent.guardrails[0].pattern.patterns[2]`). Whether an agent reference exists, and the
refusal of what the loop does not honor yet, are `runs.admission`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentrt.core import handoffs as handoffs_core
from agentrt.core import jsontext
from agentrt.core.errors import Reason, missing
from agentrt.core.structured import FINAL_OUTPUT_TOOL, Requested, native_conflict
from agentrt.core.tool_args import Validate
from agentrt.runs.spec import schemas
from agentrt.runs.spec.fields import AGENT_NAME, TOOL_NAME, bad
from agentrt.runs.spec.guardrails import validate_guardrails
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb

#: The tool service's rules for a sandbox's environment names and docker fields
#: (tools/sandbox/manager.py; a unit test keeps the two equal without runs importing tools).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
DOCKER_FIELDS = {
    "image": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}\Z"),
    "user": re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?\Z"),
    "network": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z"),
}
MAX_HANDOFFS = 32
MAX_DESCRIPTION = 4096
MAX_KEEP_TURNS = 1000
MAX_FALLBACK = 65536
MAX_ENV = 256
MAX_ENV_BYTES = 65536


def validate_contract(
    spec: pb.AgentSpec, field: str, *, implicit_tools: Sequence[str], known_providers: Sequence[str]
) -> None:
    """Check the turn-contract fields of a spec (see the module docstring).

    Args:
        spec: the spec.
        field: its path in the request ("agent", "agent_name").
        implicit_tools: default tools the snapshot adds (`default_tools`; their names are taken).
        known_providers: model providers the gateway routes.

    Raises:
        MeshError: INVALID_ARGUMENT with INVALID_JSON, INVALID_SCHEMA, INVALID_AGENT,
            INVALID_VALUE, MISSING_FIELD or UNSUPPORTED_CAPABILITY; metadata `field`.
    """
    _schemas(spec, field)
    taken = [t.name for t in spec.tools] + list(implicit_tools)
    for i, tool in enumerate(spec.tools):
        _agent_tool(tool, f"{field}.tools[{i}]", known_providers)
    handoff_names = _handoffs(spec, field, taken)
    if spec.output_json_schema and FINAL_OUTPUT_TOOL in taken + handoff_names:
        raise bad(
            f"{FINAL_OUTPUT_TOOL!r} is the final-output tool of an agent with an output schema; "
            "name the tool or handoff otherwise",
            f"{field}.tools",
        )
    validate_guardrails(spec.guardrails, f"{field}.guardrails", known_providers, tool_scope=False)
    _output_strategy(spec, field, has_tools=bool(taken or handoff_names))
    _error_handlers(spec, field)
    if spec.HasField("sandbox"):
        validate_sandbox(spec.sandbox, f"{field}.sandbox")


def _schemas(spec: pb.AgentSpec, field: str) -> None:
    if spec.output_json_schema:
        schemas.check_schema(spec.output_json_schema, f"{field}.output_json_schema")
    if spec.settings.output_json_schema:
        schemas.check_schema(spec.settings.output_json_schema, f"{field}.settings.output_json_schema")
    for i, tool in enumerate(spec.tools):
        if tool.spec.parameters_json_schema:
            where = f"{field}.tools[{i}].spec.parameters_json_schema"
            if not schemas.is_object_schema(schemas.check_schema(tool.spec.parameters_json_schema, where)):
                raise bad(f"{where} must describe an object (tool arguments are a JSON object)", where)


def _agent_tool(tool: pb.AgentTool, where: str, known_providers: Sequence[str]) -> None:
    if tool.agent_name:
        if not AGENT_NAME.match(tool.agent_name):
            raise bad(
                f"{where}.agent_name must match [a-zA-Z0-9_.-]{{1,64}}",
                f"{where}.agent_name",
                Reason.INVALID_AGENT,
            )
        if tool.HasField("spec"):
            raise bad(
                f'{where}.spec is not for an agent tool (its arguments are {{"input": string}})',
                f"{where}.spec",
            )
        if tool.command_policy.allow or tool.command_policy.deny:
            raise bad(
                f"{where}.command_policy is for exec_command, not an agent tool", f"{where}.command_policy"
            )
        if len(tool.description) > MAX_DESCRIPTION:
            raise bad(
                f"{where}.description is longer than {MAX_DESCRIPTION} characters", f"{where}.description"
            )
    else:
        if tool.agent_version:
            raise bad(f"{where}.agent_version needs agent_name", f"{where}.agent_version")
        if tool.description:
            raise bad(
                f"{where}.description is for agent tools (a client-declared tool describes itself "
                "in spec.description)",
                f"{where}.description",
            )
    if tool.agent_version < 0:
        raise bad(f"{where}.agent_version must be >= 0", f"{where}.agent_version")
    if tool.terminates_run and tool.spec.external:
        raise bad(
            f"{where}.terminates_run is for catalog and agent tools; a client-declared tool asks "
            "per result (ToolResult.terminate)",
            f"{where}.terminates_run",
        )
    validate_guardrails(tool.guardrails, f"{where}.guardrails", known_providers, tool_scope=True)


def _handoffs(spec: pb.AgentSpec, field: str, taken: Sequence[str]) -> list[str]:
    """Check `handoffs` and `handoff_targets`; return the handoff tool names."""
    entries: list[tuple[str, pb.Handoff]] = [
        (f"{field}.handoffs[{i}]", pb.Handoff(agent_name=name)) for i, name in enumerate(spec.handoffs)
    ]
    entries += [(f"{field}.handoff_targets[{i}]", h) for i, h in enumerate(spec.handoff_targets)]
    if len(entries) > MAX_HANDOFFS:
        raise bad(f"{len(entries)} handoffs, more than {MAX_HANDOFFS}", f"{field}.handoff_targets")
    targets: set[tuple[str, int]] = set()
    names: list[str] = []
    for where, h in entries:
        name_field = where if where.startswith(f"{field}.handoffs[") else f"{where}.agent_name"
        if not h.agent_name:
            raise missing(name_field)
        if not AGENT_NAME.match(h.agent_name):
            raise bad(f"{name_field} must match [a-zA-Z0-9_.-]{{1,64}}", name_field, Reason.INVALID_AGENT)
        if spec.name and h.agent_name == spec.name:
            raise bad(f"{name_field}: an agent cannot hand off to itself", name_field)
        if h.agent_version < 0:
            raise bad(f"{where}.agent_version must be >= 0", f"{where}.agent_version")
        if (h.agent_name, h.agent_version) in targets:
            raise bad(f"{name_field}: agent {h.agent_name!r} is a handoff target twice", name_field)
        targets.add((h.agent_name, h.agent_version))
        tool_name = h.tool_name or handoffs_core.default_tool_name(h.agent_name)
        if h.tool_name and not TOOL_NAME.match(h.tool_name):
            raise bad(f"{where}.tool_name must match [a-zA-Z0-9_-]{{1,64}}", f"{where}.tool_name")
        if tool_name in taken or tool_name in names:
            raise bad(
                f"{where}: the handoff's tool name {tool_name!r} is already a tool or handoff of the "
                "agent (set tool_name)",
                f"{where}.tool_name",
            )
        names.append(tool_name)
        if len(h.tool_description) > MAX_DESCRIPTION:
            raise bad(
                f"{where}.tool_description is longer than {MAX_DESCRIPTION} characters",
                f"{where}.tool_description",
            )
        if h.input_json_schema:
            schema_field = f"{where}.input_json_schema"
            if not schemas.is_object_schema(schemas.check_schema(h.input_json_schema, schema_field)):
                raise bad(
                    f"{schema_field} must describe an object (handoff input is a JSON object)", schema_field
                )
        keep = h.input_filter.keep_last_turns
        if not 0 <= keep <= MAX_KEEP_TURNS:
            raise bad(
                f"{where}.input_filter.keep_last_turns must be 0..{MAX_KEEP_TURNS}",
                f"{where}.input_filter.keep_last_turns",
            )
    return names


_STRATEGIES = {
    pb.OUTPUT_STRATEGY_UNSPECIFIED: Requested.AUTO,
    pb.OUTPUT_STRATEGY_AUTO: Requested.AUTO,
    pb.OUTPUT_STRATEGY_NATIVE: Requested.NATIVE,
    pb.OUTPUT_STRATEGY_TOOL: Requested.TOOL,
}


def requested_strategy(spec: pb.AgentSpec) -> Requested:
    """Return the core strategy a (validated) spec asks for."""
    return _STRATEGIES[spec.output_strategy]


def _output_strategy(spec: pb.AgentSpec, field: str, *, has_tools: bool) -> None:
    where = f"{field}.output_strategy"
    if spec.output_strategy not in _STRATEGIES:
        raise bad(f"{where} {spec.output_strategy} is not an OutputStrategy", where)
    if spec.output_strategy and not spec.output_json_schema:
        raise bad(f"{where} needs an output_json_schema", where)
    if native_conflict(requested_strategy(spec), spec.model.provider, has_tools=has_tools):
        raise bad(
            f"{where} NATIVE: provider {spec.model.provider!r} cannot combine a response format with "
            "tools; use AUTO or TOOL",
            where,
            Reason.UNSUPPORTED_CAPABILITY,
        )


def validate_snapshot(snap: pb.AgentSpec) -> None:
    """Check what only a run's snapshot knows: its provider (the default model resolved) and tools.

    Raises:
        MeshError: INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for output_strategy NATIVE on a
            provider that cannot combine a response format with the snapshot's tools.
    """
    _output_strategy(snap, "agent", has_tools=bool(snap.tools or snap.handoffs or snap.handoff_targets))


def _error_handlers(spec: pb.AgentSpec, field: str) -> None:
    handlers = spec.error_handlers
    check = schemas.validator(spec.output_json_schema) if spec.output_json_schema else None
    for name in ("max_turns", "refusal", "invalid_final_output"):
        h: pb.ErrorHandler = getattr(handlers, name)
        at = f"{field}.error_handlers.{name}"
        if h.action not in pb.ErrorHandlerAction.values():
            raise bad(f"{at}.action {h.action} is not an ErrorHandlerAction", f"{at}.action")
        if h.action != pb.ERROR_HANDLER_ACTION_FALLBACK:
            if h.fallback_message:
                raise bad(f"{at}.fallback_message is for action FALLBACK", f"{at}.fallback_message")
            continue
        if not h.fallback_message:
            raise missing(f"{at}.fallback_message")
        if len(h.fallback_message) > MAX_FALLBACK:
            raise bad(
                f"{at}.fallback_message is longer than {MAX_FALLBACK} characters", f"{at}.fallback_message"
            )
        if spec.output_json_schema:
            _fallback_matches(h.fallback_message, check, f"{at}.fallback_message")


def _fallback_matches(text: str, check: Validate | None, at: str) -> None:
    try:
        value = jsontext.loads(text)
    except (ValueError, RecursionError):
        raise bad(f"{at} must be JSON matching the agent's output schema", at, Reason.INVALID_JSON) from None
    problems = check(value) if check is not None else ()
    if problems:
        raise bad(f"{at} does not match the output schema: {problems[0].describe()}", at)


def validate_sandbox(box: pb.RunSandbox, at: str) -> None:
    """Check a run sandbox as ToolService.CreateSandbox would (004 §2.7n, §2.7o).

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE (backend, env, limits, network "host",
            a malformed image, user or network), INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY (an image, user or
            network on a backend other than docker).
    """
    if box.backend not in tpb.SandboxBackend.values():
        raise bad(f"{at}.backend {box.backend} is not a SandboxBackend", f"{at}.backend")
    docker = box.backend == tpb.SANDBOX_BACKEND_DOCKER
    for name in ("image", "user", "network"):
        value = getattr(box, name)
        if value and not docker:
            raise bad(
                f"{at}.{name} is for the docker backend only", f"{at}.{name}", Reason.UNSUPPORTED_CAPABILITY
            )
        if value and not DOCKER_FIELDS[name].match(value):
            raise bad(f"{at}.{name} {value[:64]!r} is malformed", f"{at}.{name}")
    if box.network == "host":
        raise bad(
            f'{at}.network "host" is refused: a sandbox does not share the host\'s network', f"{at}.network"
        )
    if len(box.env) > MAX_ENV:
        raise bad(f"{at}.env has {len(box.env)} variables, more than {MAX_ENV}", f"{at}.env")
    size = 0
    for key, value in sorted(box.env.items()):
        if not ENV_NAME.match(key):
            raise bad(f"{at}.env name {key[:64]!r} must match [A-Za-z_][A-Za-z0-9_]{{0,127}}", f"{at}.env")
        if "\x00" in value:
            raise bad(f"{at}.env[{key}] must not contain NUL", f"{at}.env")
        size += len(key.encode()) + len(value.encode())
    if size > MAX_ENV_BYTES:
        raise bad(f"{at}.env holds {size} bytes, more than {MAX_ENV_BYTES}", f"{at}.env")
    for name in ("cpu_seconds", "memory_bytes", "file_size_bytes", "open_files"):
        if getattr(box.limits, name) < 0:
            raise bad(f"{at}.limits.{name} must be >= 0", f"{at}.limits.{name}")


def handoff_targets(spec: pb.AgentSpec) -> list[handoffs_core.Target]:
    """Return a validated spec's handoffs as core targets, `handoffs` names first (for the wiring)."""
    entries = [pb.Handoff(agent_name=n) for n in spec.handoffs] + list(spec.handoff_targets)
    out = []
    for h in entries:
        f = h.input_filter if h.HasField("input_filter") else None
        out.append(
            handoffs_core.Target(
                tool_name=h.tool_name or handoffs_core.default_tool_name(h.agent_name),
                agent_name=h.agent_name,
                agent_version=h.agent_version,
                description=h.tool_description or handoffs_core.default_description(h.agent_name),
                input_schema=schemas.parse_schema(h.input_json_schema, "input_json_schema")
                if h.input_json_schema
                else None,
                input_filter=handoffs_core.InputFilter(f.drop_tool_calls, f.keep_last_turns) if f else None,
            )
        )
    return out
