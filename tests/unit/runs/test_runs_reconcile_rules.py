"""Which interrupted calls wait for a reconciliation, and what answers mean (runs.reconcile)."""

from __future__ import annotations

import json

import pytest

from agentrt.core import render
from agentrt.core.decide import Call
from agentrt.core.errors import MeshError
from agentrt.runs.domain import Answers
from agentrt.runs.loop import reconcile
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


def interrupted(reason: str) -> cpb.ToolResult:
    return cpb.ToolResult(
        status=cpb.TOOL_RESULT_STATUS_INTERRUPTED, is_error=True, details_json=json.dumps({"reason": reason})
    )


SPECS = {
    "exec_command": cpb.ToolSpec(name="exec_command"),
    "read_file": cpb.ToolSpec(name="read_file", read_only=True, retry_safe=True),
    "write_file": cpb.ToolSpec(name="write_file", retry_safe=True),
}


def test_only_side_effects_the_tool_service_lost_wait():
    calls = [
        Call(i, f"c{i}", name)
        for i, name in enumerate(["exec_command", "read_file", "write_file", "exec_command", "exec_command"])
    ]
    results = [
        interrupted("SERVICE_STOPPED"),
        interrupted("SERVICE_STOPPED"),
        interrupted("SERVICE_STOPPED"),
        interrupted("CALLER_DEADLINE"),  # the run's own deadline: a timeout the model is told about
        cpb.ToolResult(status=cpb.TOOL_RESULT_STATUS_OK),
    ]
    waiting = reconcile.waiting(calls, results, SPECS, Answers())
    assert [p.call.call_id for p in waiting] == ["c0"]
    assert waiting[0].kind == pb.PENDING_CALL_KIND_RECONCILIATION and waiting[0].reason
    answered = Answers(reconciliations={"c0": pb.Reconciliation(call_id="c0")})
    assert reconcile.waiting(calls, results, SPECS, answered) == []


def test_a_safe_call_keeps_an_honest_re_request():
    out = reconcile.rerun_safe_result(interrupted("SERVICE_STOPPED"))
    assert out.content == render.RERUN_SAFE_TEXT and out.is_error
    assert "own record" not in out.content


def test_answers_give_a_result_or_a_new_run():
    call = Call(0, "c0", "exec_command")
    supplied = reconcile.answered_result(
        call,
        pb.Reconciliation(
            action=pb.RECONCILIATION_ACTION_SUPPLY_RESULT, result=cpb.ToolResult(content="it ran")
        ),
        "{}",
    )
    assert (
        supplied.call_id == "c0"
        and supplied.status == cpb.TOOL_RESULT_STATUS_OK
        and supplied.content == "it ran"
    )
    failed = reconcile.answered_result(
        call, pb.Reconciliation(action=pb.RECONCILIATION_ACTION_FAIL, message="no"), "{}"
    )
    assert failed.is_error and "no" in failed.content
    assert (
        reconcile.answered_result(call, pb.Reconciliation(action=pb.RECONCILIATION_ACTION_RUN_AGAIN), "{}")
        is None
    )
    with pytest.raises(MeshError):
        reconcile.validate(pb.Reconciliation(call_id="c0"), 0)
    with pytest.raises(MeshError):
        reconcile.validate(pb.Reconciliation(call_id="c0", action=pb.RECONCILIATION_ACTION_SUPPLY_RESULT), 0)
