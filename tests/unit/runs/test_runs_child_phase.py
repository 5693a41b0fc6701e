"""The pure parts of agents as tools (runs/loop/phases/child/, runs/lifecycle/child_runs.py; 004 §2.8)."""

from __future__ import annotations

import pytest

from agentrt.core.errors import MeshError
from agentrt.runs.domain import Resume, RunRecord
from agentrt.runs.lifecycle.child_runs import split
from agentrt.runs.loop.phases import child as child_phase
from agentrt.runs.loop.phases.child import calls as child_calls
from agentrt.runs.spec.start import check_idempotency_key
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


def record(run_id: str, **kw) -> RunRecord:
    return RunRecord(run_id=run_id, tenant="t", session_id="s", agent_name="helper", agent_version=1,
                     agent=pb.AgentSpec(name="helper"), input="x", **kw)  # fmt: skip


def pending(call_id: str, run_id: str = "", parent_call_id: str = "") -> pb.PendingCall:
    return pb.PendingCall(
        call=cpb.ToolCall(call_id=call_id, name="exec_command"),
        kind=pb.PENDING_CALL_KIND_APPROVAL,
        run_id=run_id,
        parent_call_id=parent_call_id,
    )


def test_a_childs_key_cannot_be_a_clients():
    key = child_phase.child_key("run_a", "call_1")
    assert key != child_phase.child_key("run_a", "call_2") and "run_a" in key and "call_1" in key
    with pytest.raises(MeshError):
        check_idempotency_key(key)  # StartRun refuses it from a client


def test_a_finished_child_is_the_calls_result_with_its_usage():
    usage = cpb.Usage(input_tokens=9, output_tokens=2, requests=1)
    done = record("run_c", status=cpb.RUN_STATUS_COMPLETED, final_output="42", usage=usage)
    result = child_phase.finished_result("call_1", "ask", done)
    assert (result.content, result.is_error, result.status) == ("42", False, cpb.TOOL_RESULT_STATUS_OK)
    assert result.child_run_id == "run_c" and result.nested_usage == usage
    failed = record("run_c", status=cpb.RUN_STATUS_FAILED, failure=cpb.FailureInfo(message="no model"))
    result = child_phase.finished_result("call_1", "ask", failed)
    assert result.is_error and result.status == cpb.TOOL_RESULT_STATUS_ERROR and "no model" in result.content
    canceled = record("run_c", status=cpb.RUN_STATUS_CANCELED)
    result = child_phase.finished_result("call_1", "ask", canceled)
    assert result.is_error and result.status == cpb.TOOL_RESULT_STATUS_INTERRUPTED


def test_the_parent_shows_a_childs_calls_with_the_run_that_waits():
    child = record(
        "run_c",
        pending=[pending("c1"), pending("g1", run_id="run_g", parent_call_id="c_call")],
        state={child_phase.PARENT_CALL_ID: "p_call"},
    )
    shown = child_phase.annotated(child)
    assert [(p.call.call_id, p.run_id, p.parent_call_id) for p in shown] == [
        ("c1", "run_c", "p_call"),
        ("g1", "run_g", "c_call"),  # a grandchild's call keeps the run that waits
    ]
    assert not child.pending[0].run_id  # the child's own record is unchanged


def test_answers_are_split_by_the_run_each_call_waits_in():
    parent = record("run_p", pending=[pending("own"), pending("c1", "run_c"), pending("g1", "run_g")])
    req = Resume(
        run_id="run_p",
        decisions=[pb.ApprovalDecision(call_id=c, approved=True) for c in ("g1", "own", "c1")],
        results=[cpb.ToolResult(call_id="c1")],
    )
    own, subs = split(parent, req)
    assert own is not None and [d.call_id for d in own.decisions] == ["own"]
    assert [(s.run_id, [d.call_id for d in s.decisions], len(s.results)) for s in subs] == [
        ("run_g", ["g1"], 0),
        ("run_c", ["c1"], 1),
    ]
    own, subs = split(parent, Resume(run_id="run_p", decisions=[pb.ApprovalDecision(call_id="c1")]))
    assert own is None and [s.run_id for s in subs] == ["run_c"]


def test_nested_usage_folds_into_the_total_and_the_nested_part_once():
    usage = cpb.Usage(input_tokens=100, output_tokens=10, requests=2)
    results = [
        cpb.ToolResult(call_id="a", nested_usage=cpb.Usage(input_tokens=30, output_tokens=3, requests=1)),
        cpb.ToolResult(call_id="b"),
        cpb.ToolResult(call_id="c", nested_usage=cpb.Usage(input_tokens=5, requests=1)),
    ]
    total, state = child_phase.fold(usage, {child_phase.NESTED: {"input_tokens": 7}}, results)
    assert (total.input_tokens, total.output_tokens, total.requests) == (135, 13, 4)
    assert state == {child_phase.NESTED: {"input_tokens": 42, "output_tokens": 3, "cached_input_tokens": 0,
                                          "reasoning_tokens": 0, "requests": 2}}  # fmt: skip
    same, none = child_phase.fold(usage, {}, [cpb.ToolResult(call_id="b")])
    assert same == usage and none == {}


def test_a_childs_events_become_progress_lines_of_the_call():
    called = pb.RunEvent(
        tool_called=pb.ToolCalled(call=cpb.ToolCall(name="write_file", arguments='{"path": "a"}'))
    )
    assert child_calls._progress_line("helper", called) == '[helper] -> write_file {"path": "a"}\n'
    long_args = pb.RunEvent(tool_called=pb.ToolCalled(call=cpb.ToolCall(name="w", arguments="x" * 500)))
    assert len(child_calls._progress_line("helper", long_args)) < 260
    returned = pb.RunEvent(
        tool_returned=pb.ToolReturned(result=cpb.ToolResult(name="w", status=cpb.TOOL_RESULT_STATUS_DENIED))
    )
    assert child_calls._progress_line("helper", returned) == "[helper] <- w denied\n"
    chunk = pb.RunEvent(tool_progressed=pb.ToolProgressed(text="out\n"))
    assert child_calls._progress_line("helper", chunk) == "out\n"
    waits = pb.RunEvent(run_suspended=pb.RunSuspended(pending_calls=[pending("c1")]))
    assert child_calls._progress_line("helper", waits) == "[helper] waits for an answer: exec_command\n"
    assert child_calls._progress_line("helper", pb.RunEvent(model_delta=pb.ModelDelta(text="hi"))) == ""
