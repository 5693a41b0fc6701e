"""Interrupted side effects: which calls wait for a reconciliation, and what answers mean.

Seed 000 "Interruption and Reconciliation"; DESIGN "A run, end to end" step 3. A call the
tool service journaled as interrupted by its own death (SERVICE_STOPPED, or INTERNAL: the
service failed while the call ran) has an unknown outcome: the side effect may or may not
have happened. Then:

- a read-only or retry-safe tool keeps the re-request: its result tells the model the
  outcome is unknown and that calling again is harmless (`render.RERUN_SAFE_TEXT`);
- any other tool never goes back to the model as a re-request: the run suspends with the
  call pending as RECONCILIATION, and ResumeRun answers it: RUN_AGAIN (a new execution
  attempt: exactly one more run of the call), SUPPLY_RESULT (the caller says what
  happened) or FAIL (the model is told the call failed, and why).

Interruptions the run caused itself are not reconciled: a cancel or the time budget
(`Cancelled while running`), or the run's own deadline on the call (CALLER_DEADLINE: a
timeout the model is told about). No grpc here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from agentrt.core import render
from agentrt.core.decide import Call
from agentrt.core.errors import Reason, invalid
from agentrt.runs.domain import Answers
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: Journal reasons of an interruption the tool service suffered (outcome unknown).
_SERVICE_DIED = ("SERVICE_STOPPED", "INTERNAL")


def _journal_reason(result: cpb.ToolResult) -> str:
    try:
        details = json.loads(result.details_json) if result.details_json else {}
    except ValueError:
        return ""
    return str(details.get("reason", "")) if isinstance(details, dict) else ""


def interrupted_by_service(result: cpb.ToolResult) -> bool:
    """True when the tool service's own end interrupted the call (its outcome is unknown)."""
    return result.status == cpb.TOOL_RESULT_STATUS_INTERRUPTED and _journal_reason(result) in _SERVICE_DIED


def safe_to_rerun(spec: cpb.ToolSpec | None) -> bool:
    """True for a tool whose call may run twice harmlessly (read-only or retry-safe)."""
    return spec is not None and (spec.read_only or spec.retry_safe)


def rerun_safe_result(result: cpb.ToolResult) -> cpb.ToolResult:
    """The model-facing result of an interrupted read-only or retry-safe call (a re-request)."""
    out = cpb.ToolResult()
    out.CopyFrom(result)
    out.content = render.RERUN_SAFE_TEXT
    out.is_error = True
    out.summary = "interrupted: safe to call again"
    return out


def waiting(
    calls: Sequence[Call],
    results: Sequence[cpb.ToolResult],
    specs: Mapping[str, cpb.ToolSpec],
    answers: Answers,
) -> list[pb.PendingCall]:
    """Return the calls that wait for a reconciliation, in call order.

    Args:
        calls: the turn's calls, in call order.
        results: their results, in the same order.
        specs: offered tool specs by name.
        answers: answers received so far (a call answered already does not wait again).
    """
    answered = set(answers.reconciliations)
    out: list[pb.PendingCall] = []
    for call, result in zip(calls, results, strict=True):
        if (
            call.call_id in answered
            or not interrupted_by_service(result)
            or safe_to_rerun(specs.get(call.name))
        ):
            continue
        out.append(
            pb.PendingCall(
                call=cpb.ToolCall(
                    call_id=call.call_id, name=call.name, arguments=call.arguments, index=call.index
                ),
                kind=pb.PENDING_CALL_KIND_RECONCILIATION,
                reason=(
                    f"The tool service stopped while {call.name} ran, so it may or may not have taken "
                    "effect. Answer with RUN_AGAIN, SUPPLY_RESULT or FAIL."
                ),
            )
        )
    return out


def answered_result(call: Call, answer: pb.Reconciliation, runtime_details: str) -> cpb.ToolResult | None:
    """Return the result a reconciliation answer gives a call (None: RUN_AGAIN, it runs again)."""
    if answer.action == pb.RECONCILIATION_ACTION_SUPPLY_RESULT:
        result = cpb.ToolResult()
        result.CopyFrom(answer.result)
        result.call_id, result.name = call.call_id, call.name
        if result.status == cpb.TOOL_RESULT_STATUS_UNSPECIFIED:
            result.status = cpb.TOOL_RESULT_STATUS_ERROR if result.is_error else cpb.TOOL_RESULT_STATUS_OK
        return result
    if answer.action == pb.RECONCILIATION_ACTION_FAIL:
        why = f": {answer.message}" if answer.message else "."
        return cpb.ToolResult(
            call_id=call.call_id,
            name=call.name,
            content=f"The call was interrupted and an operator marked it as failed{why}",
            is_error=True,
            status=cpb.TOOL_RESULT_STATUS_ERROR,
            summary="failed by reconciliation",
            details_json=runtime_details,
        )
    return None


def validate(answer: pb.Reconciliation, index: int) -> None:
    """Refuse a reconciliation that says nothing usable (changes nothing).

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE naming `reconciliations[i]`.
    """
    where = f"reconciliations[{index}]"
    if answer.action not in (
        pb.RECONCILIATION_ACTION_RUN_AGAIN,
        pb.RECONCILIATION_ACTION_SUPPLY_RESULT,
        pb.RECONCILIATION_ACTION_FAIL,
    ):
        raise invalid(
            Reason.INVALID_VALUE,
            f"{where}.action must be RUN_AGAIN, SUPPLY_RESULT or FAIL",
            field=f"{where}.action",
        )
    if answer.action == pb.RECONCILIATION_ACTION_SUPPLY_RESULT and not answer.HasField("result"):
        raise invalid(
            Reason.MISSING_FIELD, f"{where}.result is required with SUPPLY_RESULT", field=f"{where}.result"
        )
