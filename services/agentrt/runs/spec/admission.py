"""What StartRun and ResumeRun admit of the turn contract (issue 11).

Before anything is stored or started:

- References: `check_references` looks every agent a spec names (handoff targets, agent
  tools) up in the tenant's registry; one that is not registered (or not that version)
  is INVALID_ARGUMENT/UNKNOWN_AGENT. It runs at StartRun, not at RegisterAgent: two
  agents handing off to each other could otherwise never both be registered. The target
  is resolved again when the handoff or the call happens (a fresh snapshot, 004 §2.3a).
- Request fields: StartRun's `sandbox` is validated (`check_start_request`); ResumeRun's
  client results may not set what the runtime sets (`check_resume_results`).

Every field of the turn contract is honored by the run loop today (handoffs, guardrails,
agents as tools, structured output, stopping early, error handlers, deferred tools, run
sandboxes), so nothing is refused as not built. A field added to the contract before the
loop honors it is to be refused with UNIMPLEMENTED/NOT_IMPLEMENTED_YET naming it, never
silently ignored.

`check_start` is the servicer's one call before StartRun reaches the manager: it resolves
the spec the way the manager will (inline, or registered by name and version), and when
the spec names other agents it validates the spec and checks its references. A request the
manager refuses for its own reasons (no agent, a bad name, an unknown agent) is left to the
manager, so those errors read as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentrt.core.errors import Reason, invalid
from agentrt.runs.spec import validation
from agentrt.runs.spec.fields import AGENT_NAME, TOOL_NAME
from agentrt.v1 import run_service_pb2 as pb

#: Looks a registered agent up: (name, version; 0 = latest) -> the spec, or None.
AgentLookup = Callable[[str, int], Awaitable[pb.AgentSpec | None]]
#: Most names one tool result may disclose (ToolResult.added_tools).
MAX_ADDED_TOOLS = 64


def check_start_request(req: pb.StartRunRequest) -> None:
    """Check the StartRun request's own turn-contract fields.

    Raises:
        MeshError: INVALID_ARGUMENT (validation.validate_sandbox) for `sandbox`.
    """
    if req.HasField("sandbox"):
        validation.validate_sandbox(req.sandbox, "sandbox")


def check_resume_results(req: pb.ResumeRunRequest) -> None:
    """Check the turn-contract fields of ResumeRun's client results.

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
            if not TOOL_NAME.match(name):
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
            the request's sandbox INVALID_ARGUMENT (validation.validate_sandbox).
    """
    from agentrt.runs.spec.agents import validate_agent  # agents imports this module's peers

    spec: pb.AgentSpec | None = None
    field = "agent"
    if req.agent_name:
        if AGENT_NAME.match(req.agent_name) and req.agent_version >= 0:
            spec, field = await lookup(req.agent_name, req.agent_version), "agent_name"
    elif req.HasField("agent"):
        spec = req.agent
    if spec is None:
        return  # the manager refuses the request itself
    if spec.handoffs or spec.handoff_targets or any(t.agent_name for t in spec.tools):
        validate_agent(spec, require_name=bool(req.agent_name), field=field)
        await check_references(spec, lookup, field)
    check_start_request(req)
