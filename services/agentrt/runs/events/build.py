"""The run events built outside a run's channel: a run's first events and event payloads (004 §2.11).

- `run_started_events`: a new run's `run_started` and phase `prompted` (002 RunStarted).
- `child_run_linked`: a parent's link to a child run (002 run tree; 004 §2.8).
- `guardrail_result`: the payload of a consulted guardrail's event (004 §2.6) from its
  `core.guardrails.Result`.
"""

from __future__ import annotations

import time

from agentrt.core.guardrails import Result
from agentrt.runs.domain import RunRecord
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


def run_started_events(record: RunRecord) -> list[pb.RunEvent]:
    """Return a new run's first events (`run_started`, phase `prompted`), stamped now (002 RunStarted)."""
    snap = record.agent
    started = pb.RunEvent(
        run_id=record.run_id,
        run_started=pb.RunStarted(
            agent_name=snap.name, session_id=record.session_id, input=record.input, model=snap.model
        ),
    )
    prompted = pb.RunEvent(run_id=record.run_id, phase_changed=pb.PhaseChanged(phase=cpb.RUN_PHASE_PROMPTED))
    for ev in (started, prompted):
        ev.time.FromNanoseconds(time.time_ns())
    return [started, prompted]


def child_run_linked(call_id: str, child: RunRecord) -> pb.ChildRunLinked:
    """Return the payload of a parent's `child_run_linked` event (002 run tree; 004 §2.8).

    Durable (not in PROVISIONAL): it reaches a subscriber only once the parent's log holds the link.
    """
    return pb.ChildRunLinked(
        call_id=call_id,
        child_run_id=child.run_id,
        agent_name=child.agent_name,
        agent_version=child.agent_version,
        session_id=child.session_id,
    )


_STAGES = {
    "input": pb.GUARDRAIL_STAGE_INPUT,
    "output": pb.GUARDRAIL_STAGE_OUTPUT,
    "tool_input": pb.GUARDRAIL_STAGE_TOOL_INPUT,
    "tool_output": pb.GUARDRAIL_STAGE_TOOL_OUTPUT,
}
_DECISIONS = {
    "allow": pb.GUARDRAIL_DECISION_ALLOW,
    "replace": pb.GUARDRAIL_DECISION_REPLACE,
    "trip": pb.GUARDRAIL_DECISION_TRIP,
}


def guardrail_result(result: Result, duration_s: float, usage: cpb.Usage | None = None) -> pb.GuardrailResult:
    """Return the `guardrail_result` event payload of one consulted guardrail (004 §2.6).

    Args:
        result: the guardrail's outcome (core.guardrails); no decision = it failed or was
            cancelled (its `error` says which).
        duration_s: wall time it took, in seconds (>= 0).
        usage: a model guardrail's tokens (nested usage, 004 §2.7f); None for a pattern.
    """
    out = pb.GuardrailResult(
        guardrail=result.guardrail,
        stage=_STAGES[str(result.stage)],  # type: ignore[arg-type]
        decision=_DECISIONS[str(result.decision)] if result.decision else 0,  # type: ignore[arg-type]
        message=result.message,
        call_id=result.call_id,
        error=result.error,
        scope=result.scope,
    )
    out.duration.FromNanoseconds(int(max(0.0, duration_s) * 1e9))
    if usage is not None and usage.ByteSize():
        out.usage.CopyFrom(usage)
    return out
