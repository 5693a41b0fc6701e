"""A run record -> the proto Run, and the run's queued input as the contracts show it.

- `run_out`: a `RunRecord` -> the proto Run GetRun and ListRuns answer (the state's
  parent link, children, nested usage, sandbox, current agent and disclosed tools read out).
- `injected_only` / `injected_out`: the run's queued input (StopAfterTurn requests, kind
  `STOP_KIND`, left out) as `InjectedInput`.
"""

from __future__ import annotations

import base64
import json

from agentrt.runs.domain import RunRecord
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

_INJECTION_KINDS = {
    "steer": pb.INJECTION_KIND_STEER,
    "next_turn": pb.INJECTION_KIND_NEXT_TURN,
    "follow_up": pb.INJECTION_KIND_FOLLOW_UP,
}


#: The queue kind of a StopAfterTurn request (runs/loop/phases/stopping.py): it rides on the
#: run's input queue so the save point that reads queued input reads it too, whichever
#: replica owns the run; it is not input, so it is never shown or reported as such.
STOP_KIND = "stop"


def injected_only(items: list[dict[str, object]]) -> list[dict[str, object]]:
    """Return the queued items that are injected input (StopAfterTurn requests left out)."""
    return [i for i in items if i.get("kind") != STOP_KIND]


def injected_out(item: dict[str, object]) -> pb.InjectedInput:
    """Return the proto InjectedInput of a queued input ({"id", "kind", "text"})."""
    return pb.InjectedInput(
        id=str(item.get("id", "")),
        kind=_INJECTION_KINDS.get(str(item.get("kind", "")), pb.INJECTION_KIND_UNSPECIFIED),  # type: ignore[arg-type]
        text=str(item.get("text", "")),
    )


def run_out(r: RunRecord) -> pb.Run:
    """Return the proto Run of a run record."""
    run = pb.Run(
        run_id=r.run_id,
        session_id=r.session_id,
        agent_name=r.agent_name,
        agent_version=r.agent_version,
        status=r.status,  # type: ignore[arg-type]
        phase=r.phase,  # type: ignore[arg-type]
        turns=r.turns,
        usage=r.usage,
        final_output=r.final_output,
        pending_calls=r.pending,
        labels=r.labels,
        workspace=r.workspace,
        suspension_reason=r.suspension_reason,  # type: ignore[arg-type]
        pending_input=[injected_out(i) for i in injected_only(r.pending_input)],
        stop_requested=any(i.get("kind") == STOP_KIND for i in r.pending_input)
        or "stopped_output" in r.state,
        diagnostics=r.diagnostics(),
        overflow_retries=r.overflow_retries,
    )
    if r.failure is not None:
        run.failure.CopyFrom(r.failure)
    disclosed = r.state.get("disclosure")  # runs/loop/phases/disclosure.py
    if disclosed:
        run.disclosed_tools.extend(json.loads(str(disclosed)).get("disclosed", []))
    # agents as tools (runs/loop/phases/child/): the parent link, the children, nested usage
    run.parent_run_id = str(r.state.get("parent_run_id", ""))
    run.parent_call_id = str(r.state.get("parent_call_id", ""))
    run.child_run_ids.extend(str(x) for x in r.state.get("child_run_ids", []))
    nested = r.state.get("nested_usage")
    if isinstance(nested, dict):
        run.nested_usage.CopyFrom(cpb.Usage(**{k: int(v) for k, v in nested.items()}))
    run.sandbox_id = str(r.state.get("sandbox_id", ""))  # runs/lifecycle/sandboxes.py
    current = r.state.get("agent")  # the last handoff's target (runs/loop/phases/handoff.py)
    if current:
        snap = pb.AgentSpec.FromString(base64.b64decode(current))
        run.current_agent_name, run.current_agent_version = snap.name, snap.version
    run.create_time.FromNanoseconds(int(r.create_time_s * 1e9))
    run.update_time.FromNanoseconds(int(r.update_time_s * 1e9))
    return run
