"""What RegisterAgent, StartRun and ResumeRun admit of the turn contract (issue 11).

Two jobs, both before anything is stored or started:

- References: `check_references` looks every agent a spec names (handoff targets, agent
  tools) up in the tenant's registry; one that is not registered (or not that version)
  is INVALID_ARGUMENT/UNKNOWN_AGENT. It runs at StartRun, not at RegisterAgent: two
  agents handing off to each other could otherwise never both be registered. The target
  is resolved again when the handoff or the call happens (a fresh snapshot, 004 §2.3a).
- Refusals: the contract is declared and validated in full, but the run loop does not
  honor all of it yet. A spec or request setting a field the loop would ignore is refused
  with UNIMPLEMENTED/NOT_IMPLEMENTED_YET naming the field (`refuse_unwired*`), after every
  other check passed, so nothing is silently ignored. The wiring of each behavior into the
  loop removes its line here.

`check_start` is the servicer's one call before StartRun reaches the manager: it resolves
the spec the way the manager will (inline, or registered by name and version), and when
the spec or the request uses the contract it validates the spec (refusals held back),
checks its references, then refuses what is not honored. A request the manager refuses
for its own reasons (no agent, a bad name, an unknown agent) is left to the manager, so
those errors read as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentrt.core.errors import MeshError, Reason, Status, invalid
from agentrt.runs.spec import validation
from agentrt.v1 import run_service_pb2 as pb

#: Looks a registered agent up: (name, version; 0 = latest) -> the spec, or None.
AgentLookup = Callable[[str, int], Awaitable[pb.AgentSpec | None]]
#: Most names one tool result may disclose (ToolResult.added_tools).
MAX_ADDED_TOOLS = 64


def _not_yet(what: str, field: str) -> MeshError:
    return MeshError(
        Status.UNIMPLEMENTED,
        Reason.NOT_IMPLEMENTED_YET,
        f"{what} are not available yet ({field}): the run loop does not honor them, so this is refused "
        "rather than run without them",
        {"field": field},
    )


def uses_contract(spec: pb.AgentSpec) -> bool:
    """True when a spec sets any field the loop does not honor yet (see `refuse_unwired`)."""
    try:
        refuse_unwired(spec, "agent")
    except MeshError:
        return True
    return False


def refuse_unwired(spec: pb.AgentSpec, field: str) -> None:
    """Refuse a validated spec that sets a turn-contract field the loop does not honor yet.

    Honored today, so not refused: handoffs (runs/loop/handoff_phase.py), guardrails
    (runs/loop/guardrail_phase.py),
    AgentTool.sequential, `deferred`, error handlers (fail or fallback),
    `final_turn_without_tools`, `terminates_run`, every output_strategy (the final-output tool,
    runs/loop/structured_phase.py), `sandbox` (runs/sandboxes.py).

    Raises:
        MeshError: UNIMPLEMENTED/NOT_IMPLEMENTED_YET; metadata `field` names the first such
            field.
    """
    for i, tool in enumerate(spec.tools):
        where = f"{field}.tools[{i}]"
        if tool.agent_name:
            raise _not_yet("agents as tools", f"{where}.agent_name")


def refuse_unwired_start(req: pb.StartRunRequest) -> None:
    """Check the StartRun request's own turn-contract fields (the loop honors them all).

    Raises:
        MeshError: INVALID_ARGUMENT (validation.validate_sandbox) for `sandbox`.
    """
    if req.HasField("sandbox"):
        validation.validate_sandbox(req.sandbox, "sandbox")


def refuse_unwired_resume(req: pb.ResumeRunRequest) -> None:
    """Check the turn-contract fields of ResumeRun's client results; refuse what is not honored.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE for `child_run_id` (set by the runtime,
            never by a client), more than MAX_ADDED_TOOLS `added_tools` or a malformed name.
    """
    for i, result in enumerate(req.results):
        where = f"results[{i}]"
        if result.child_run_id:
            raise invalid(
                Reason.INVALID_VALUE,
                f"{where}.child_run_id is set by the runtime, not by a client",
                field=f"{where}.child_run_id",
            )
        if len(result.added_tools) > MAX_ADDED_TOOLS:
            raise invalid(
                Reason.INVALID_VALUE,
                f"{where}.added_tools names more than {MAX_ADDED_TOOLS} tools",
                field=f"{where}.added_tools",
            )
        for j, name in enumerate(result.added_tools):
            if not validation.TOOL_NAME.match(name):
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"{where}.added_tools[{j}] must match [a-zA-Z0-9_-]{{1,64}}",
                    field=f"{where}.added_tools[{j}]",
                )


async def check_references(spec: pb.AgentSpec, lookup: AgentLookup, field: str) -> None:
    """Check that every agent a validated spec names is registered (handoffs, agent tools).

    Raises:
        MeshError: INVALID_ARGUMENT/UNKNOWN_AGENT; metadata `field` names the reference.
    """
    refs = [(f"{field}.handoffs[{i}]", name, 0) for i, name in enumerate(spec.handoffs)]
    refs += [
        (f"{field}.handoff_targets[{i}].agent_name", h.agent_name, h.agent_version)
        for i, h in enumerate(spec.handoff_targets)
    ]
    refs += [
        (f"{field}.tools[{i}].agent_name", t.agent_name, t.agent_version)
        for i, t in enumerate(spec.tools)
        if t.agent_name
    ]
    for where, name, version in refs:
        if await lookup(name, version) is None:
            which = f"version {version} of " if version else ""
            raise invalid(
                Reason.UNKNOWN_AGENT, f"{where}: {which}agent {name!r} is not registered", field=where
            )


async def check_start(req: pb.StartRunRequest, lookup: AgentLookup) -> None:
    """Check StartRun's use of the turn contract before the manager sees it (module docstring).

    Args:
        req: the request.
        lookup: the tenant's agent registry.

    Raises:
        MeshError: the spec's INVALID_ARGUMENT (see agents.validate_agent), UNKNOWN_AGENT,
            then UNIMPLEMENTED/NOT_IMPLEMENTED_YET for what is not honored.
    """
    from agentrt.runs.spec.agents import validate_agent  # agents imports this module's peers

    spec: pb.AgentSpec | None = None
    field = "agent"
    if req.agent_name:
        if validation.AGENT_NAME.match(req.agent_name) and req.agent_version >= 0:
            spec, field = await lookup(req.agent_name, req.agent_version), "agent_name"
    elif req.HasField("agent"):
        spec = req.agent
    if spec is None:
        return  # the manager refuses the request itself
    if uses_contract(spec) or spec.handoffs or spec.handoff_targets:
        validate_agent(spec, require_name=bool(req.agent_name), field=field, refuse=False)
        await check_references(spec, lookup, field)
        refuse_unwired(spec, field)
    refuse_unwired_start(req)
