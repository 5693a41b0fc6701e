"""The run events built outside a run's channel, and the payloads several places build (004 §2.11).

A run's executor numbers, stamps and releases its events through its channel
(runs/events/channel.py, `RunChannel.publish`); the events of a transition made outside an
executor are built here, stamped now and numbered by the store at their save:
- `run_started_events`: a new run's `run_started` and phase `prompted` (002 RunStarted);
- `run_resumed_event`: a suspended run continued by ResumeRun;
- `run_ended_events`: `run_completed` and `stream_end` of a run no executor drives (a
  suspended run canceled, or one whose owner died).
Payloads built here for both paths: `run_completed` (the executor's end and the one above),
`child_run_linked` (002 run tree), `guardrail_result` (004 §2.6, from a
`core.guardrails.Result`). A stream's own `gap_event` (runs/events/stream.py) is built here too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from agentrt.core.guardrails import Result
from agentrt.runs.convert.run import injected_only, injected_out
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


def run_resumed_event(record: RunRecord, answered: int) -> pb.RunEvent:
    """Return the `run_resumed` event of a suspended run continued now (002 continuation).

    Args:
        record: the run as it was suspended (its next turn is `turns + 1`).
        answered: the number of pending calls the resume answered (>= 0).
    """
    resumed = pb.RunEvent(
        run_id=record.run_id, turn=record.turns + 1, run_resumed=pb.RunResumed(decisions=answered)
    )
    resumed.time.FromNanoseconds(time.time_ns())
    return resumed


def run_completed(
    record: RunRecord,
    status: int,
    phase: int,
    *,
    final_output: str = "",
    unconsumed: list[dict[str, Any]] | None = None,
    failure: cpb.FailureInfo | None = None,
) -> pb.RunCompleted:
    """Return the `run_completed` payload of a run ending with `status` in `phase` (002 RunCompleted).

    Args:
        record: the run (its usage, turns and labels are reported).
        status: the terminal RunStatus.
        phase: the terminal RunPhase.
        final_output: the run's output ("" when it has none).
        unconsumed: injected input that arrived too late (queued items, in queue order).
        failure: the structured failure of a failed run.
    """
    completed = pb.RunCompleted(
        status=status,  # type: ignore[arg-type]
        phase=phase,  # type: ignore[arg-type]
        final_output=final_output,
        usage=record.usage,
        turns=record.turns,
        labels=record.labels,
        unconsumed_input=[injected_out(i) for i in unconsumed or []],
    )
    if failure is not None:
        completed.failure.CopyFrom(failure)
    return completed


#: The diagnostic a run's end adds when injected input was left undelivered.
NOT_CONSUMED = "injected_input_not_consumed"


def not_consumed_message(count: int) -> str:
    """The message of the NOT_CONSUMED diagnostic for `count` inputs."""
    return f"{count} injected input(s) arrived too late and were not delivered."


def settle_unconsumed(events: Sequence[pb.RunEvent], queue_json: str | None) -> None:
    """Make a run's end report the injected input its queue holds as of the end's commit.

    The run reads its queue before it builds `run_completed`; an InjectInput accepted
    between that read and the terminal save (which closes the queue: a finished run takes
    none) would be reported nowhere. Called by the terminal save under the run row's lock
    (RunStore.save `settle`), this rewrites `run_completed.unconsumed_input` among `events`
    from the queue, and the NOT_CONSUMED diagnostic's count and ids when the run published one.
    """
    left = injected_only(json.loads(queue_json or "[]"))
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "run_completed":
            done = event.run_completed
            del done.unconsumed_input[:]
            done.unconsumed_input.extend(injected_out(i) for i in left)
        elif kind == "diagnostic" and event.diagnostic.code == NOT_CONSUMED and left:
            event.diagnostic.message = not_consumed_message(len(left))
            event.diagnostic.details_json = json.dumps({"ids": [i.get("id") for i in left]})


def run_ended_events(record: RunRecord, completed: pb.RunCompleted) -> list[pb.RunEvent]:
    """Return a run's last two events, `run_completed` then `stream_end`, stamped now.

    For a run no executor drives; an executor publishes the same two through its channel.
    """
    ended = pb.RunEvent(run_id=record.run_id, run_completed=completed)
    end = pb.RunEvent(run_id=record.run_id, stream_end=pb.StreamEnd(status=completed.status))
    for ev in (ended, end):
        ev.time.FromNanoseconds(time.time_ns())
    return [ended, end]


def gap_event(
    last_good: int, dropped: int, next_seq: int, run_id: str = "", at_end: bool = False
) -> pb.RunEvent:
    """Return a stream's `gap` event: `dropped` events after `last_good` cannot be delivered (004 §2.11).

    Its seq is `last_good`, so a subscriber that reconnects from the last seq it saw resyncs;
    `next_seq` is the next event delivered (0: none follows), `at_end` that the run ended.
    """
    return pb.RunEvent(
        seq=last_good,
        run_id=run_id,
        gap=pb.EventGap(last_good=last_good, dropped=dropped, next=next_seq, at_end=at_end),
    )


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
