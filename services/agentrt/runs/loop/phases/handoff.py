"""Handoffs in the run loop (004 §2.4, §2.2 step 8): who owns the next turn, and what it sees.

The pure rules are `core/handoffs.py`; this module applies them to a run:

- `offered`: the handoff tools of the current agent (offered next to its tools).
- `plan`: a response's handoff calls. The first wins and is answered with the
  acknowledgement (marker `{"assistant": <target>}` + identity line), the others with
  `ignored_text`; the regular calls run first, through the tool phase; the winning
  call's input is checked (an object; absent = {}; the whole schema), a rejected one
  fails the run (`invalid_handoff_input`).
- `resolve_target`: the target's snapshot, resolved fresh at the handoff (the registry,
  then the catalog, as StartRun does); a target with no model runs on the run's model.
- the run's state (`RunRecord.state`) keeps the current agent's snapshot (`agent`, base64)
  and the handoff that made it current (`handoff`: the session seq its turn was persisted
  at, the call id, the target's input filter), written at the handoff turn's save point,
  so a resume or a takeover continues with the target.
- `view`: the target's input filter applied to the rendered history (what the target
  sees; the session keeps everything).

Run-level settings (max_turns and the other limits, error handlers) stay the entry
agent's: `max_turns` keeps counting across a handoff.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrt.core import handoffs, render
from agentrt.core.decide import Call, Decision
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.loop.failures import failure
from agentrt.runs.loop.phases.tools import runtime_result
from agentrt.runs.spec import schemas, validation
from agentrt.runs.spec.agents import snapshot
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: State keys (RunRecord.state).
AGENT, HANDOFF = "agent", "handoff"


def targets_of(snap: pb.AgentSpec) -> dict[str, handoffs.Target]:
    """Return the snapshot's handoffs by tool name."""
    return {t.tool_name: t for t in validation.handoff_targets(snap)}


def offered(snap: pb.AgentSpec) -> list[cpb.ToolSpec]:
    """Return the handoff tools the model is offered, in declaration order."""
    return [
        cpb.ToolSpec(
            name=t.tool_name,
            description=t.description,
            parameters_json_schema=json.dumps(handoffs.tool_parameters(t)),
        )
        for t in targets_of(snap).values()
    ]


@dataclass
class HandoffPlan:
    """A response's handoff (see the module docstring).

    Attributes:
        call: the winning handoff call.
        target: its target.
        answered: results of every handoff call (the winner's acknowledgement, the
            others' ignored text), by call id: they never run.
    """

    call: Call
    target: handoffs.Target
    answered: dict[str, cpb.ToolResult] = field(default_factory=dict)


class HandoffFailed(Exception):
    """The handoff cannot happen; the run fails with this structured failure."""

    def __init__(self, failure: cpb.FailureInfo) -> None:
        """Carry failure."""
        super().__init__(failure.message)
        self.failure = failure


def plan(snap: pb.AgentSpec, decision: Decision) -> HandoffPlan | None:
    """Return the response's handoff, or None when it calls none; pure.

    Raises:
        HandoffFailed: kind `invalid_handoff_input` (details_json {"pointer", "error"}).
    """
    targets = targets_of(snap)
    if not targets or not decision.calls:
        return None
    res = handoffs.resolve(decision.calls, targets)
    if res.handoff is None or res.target is None:
        return None
    call, target = res.handoff, res.target
    schema_text = json.dumps(target.input_schema) if target.input_schema is not None else ""
    try:
        handoffs.check_input(
            call.arguments or call.invalid_arguments,
            target.input_schema,
            schemas.validator(schema_text) if schema_text else None,
        )
    except handoffs.HandoffInputError as exc:
        invalid_input = failure(
            handoffs.KIND_INVALID_INPUT,
            f"The handoff to {target.agent_name} had input it does not accept.",
            debug=str(exc),
            details_json=json.dumps({"pointer": exc.pointer, "error": exc.error}),
        )
        raise HandoffFailed(invalid_input) from None
    ack = handoffs.acknowledgement(target.agent_name)
    answered = {call.call_id: runtime_result(call, ack, cpb.TOOL_RESULT_STATUS_OK, is_error=False)}
    for other in res.ignored:
        text = handoffs.ignored_text(target.agent_name)
        answered[other.call_id] = runtime_result(other, text, cpb.TOOL_RESULT_STATUS_NOT_EXECUTED)
    return HandoffPlan(call, target, answered)


async def resolve_target(
    registry: Any, catalog: Any, tenant: str, target: handoffs.Target, run_model: cpb.ModelRef
) -> pb.AgentSpec:
    """Return the target's snapshot, resolved now (004 §2.3a: a fresh snapshot per handoff).

    Args:
        registry: async (tenant, name, version) -> AgentSpec | None (the runs store).
        catalog: async (tenant) -> the tool catalog by name (the tool service).
        tenant: the run's tenant.
        target: the handoff's target.
        run_model: the model a target naming none runs on (the run's resolved model).

    Raises:
        HandoffFailed: kind `handoff_failed` when the target is no longer registered or its
            snapshot cannot be built (a tool left the catalog).
    """
    spec = await registry(tenant, target.agent_name, target.agent_version)
    if spec is None:
        which = f"version {target.agent_version} of " if target.agent_version else ""
        raise HandoffFailed(
            failure(
                "handoff_failed",
                f"The handoff target {which}{target.agent_name!r} is not registered.",
                reason=str(Reason.UNKNOWN_AGENT),
            )
        )
    try:
        return snapshot(spec, f"{run_model.provider}:{run_model.model}", await catalog(tenant))
    except MeshError as err:
        if err.status != Status.INVALID_ARGUMENT:
            raise
        raise HandoffFailed(
            failure(
                "handoff_failed",
                f"The handoff target {target.agent_name!r} cannot run: {err.message}",
                reason=str(err.reason),
            )
        ) from None


def current_agent(state: dict[str, Any], entry: pb.AgentSpec) -> pb.AgentSpec:
    """Return the snapshot whose turn it is: the last handoff's target, else the entry agent."""
    encoded = state.get(AGENT)  # base64 of the snapshot's bytes
    if not encoded:
        return entry
    return pb.AgentSpec.FromString(base64.b64decode(encoded))


def switched_state(
    target: pb.AgentSpec, call: Call, f: handoffs.InputFilter | None, seq: int
) -> dict[str, Any]:
    """Return the state values that make `target` current after a handoff persisted at seq."""
    return {
        AGENT: base64.b64encode(target.SerializeToString()).decode("ascii"),
        HANDOFF: {
            "seq": seq,
            "call_id": call.call_id,
            "drop_tool_calls": bool(f and f.drop_tool_calls),
            "keep_last_turns": f.keep_last_turns if f else 0,
        },
    }


def view(history: Sequence[Any], items_until: int, state: dict[str, Any]) -> list[Any]:
    """Return what the current agent sees of the history (its handoff's input filter applied).

    Args:
        history: the rendered history of the context entries.
        items_until: how many leading history items were written up to the handoff turn.
        state: the run's state.
    """
    h = state.get(HANDOFF)
    if not h:
        return list(history)
    f = handoffs.InputFilter(bool(h.get("drop_tool_calls")), int(h.get("keep_last_turns", 0)))
    before = history[:items_until]
    if f.identity or any(isinstance(i, render.Summary) for i in before):
        return list(history)  # a compacted prefix is already what the target reads
    return list(handoffs.filter_history(list(history), items_until, f, str(h.get("call_id", ""))))


def handoff_seq(state: dict[str, Any]) -> int | None:
    """Return the session seq the last handoff's turn was persisted at (None: no handoff)."""
    h = state.get(HANDOFF)
    return int(h["seq"]) if h else None
