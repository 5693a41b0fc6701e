"""How runs end: max_turns, gateway errors, refusal, tool loops, cancellation, nudges."""

from __future__ import annotations

import json

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply
from tests.service.runs.harness import agent


def ls_reply() -> Reply:
    return Reply(tool_calls=[ToolCallReply("list_files", "{}")])


async def test_max_turns_fails_structured(mesh):
    mesh.emu.script([ls_reply() for _ in range(3)])
    spec = agent(limits=pb.AgentLimits(max_turns=2))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="loop"))
    events = await mesh.events(started.run_id)
    done = events[-2].run_completed
    assert done.status == cpb.RUN_STATUS_FAILED and done.phase == cpb.RUN_PHASE_FAILED
    assert done.failure.kind == "max_turns" and not done.failure.retryable and done.failure.message
    assert done.turns == 2
    assert len(mesh.emu.requests) == 2  # the third turn was never requested
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.failure.kind == "max_turns" and run.status == cpb.RUN_STATUS_FAILED


async def test_rate_limit_exhausted_is_a_retryable_failure(mesh):
    mesh.emu.script([ErrorReply(status=429, retry_after=0.01) for _ in range(4)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="hi"))
    events = await mesh.events(started.run_id)
    failure = events[-2].run_completed.failure
    assert failure.kind == "rate_limited" and failure.retryable and failure.reason == "RATE_LIMITED"
    assert "try again" in failure.message
    # the input was persisted before the model call; no turn was
    entries = await mesh.entries(started.session_id)
    assert len(entries) == 1 and entries[0].item.message.role == cpb.ROLE_USER


async def test_refusal_fails_with_kind_refusal(mesh):
    mesh.emu.script([Reply(text="I can't help with that.", stop="refusal")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent("anthropic"), input="bad"))
    events = await mesh.events(started.run_id)
    responded = [e.model_responded for e in events if e.WhichOneof("payload") == "model_responded"]
    assert responded[0].decision == pb.DECISION_KIND_REFUSAL
    assert events[-2].run_completed.failure.kind == "refusal"


async def test_consecutive_failed_tool_turns_end_the_run(mesh):
    bad = Reply(tool_calls=[ToolCallReply("read_file", '{"path": "missing.txt"}')])
    mesh.emu.script([bad, bad, bad])
    spec = agent(limits=pb.AgentLimits(max_consecutive_error_turns=2))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="read"))
    events = await mesh.events(started.run_id)
    assert events[-2].run_completed.failure.kind == "tool_loop"
    assert events[-2].run_completed.turns == 2


async def test_unknown_tool_and_invalid_arguments_are_fed_back(mesh):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[ToolCallReply("teleport", "{}"), ToolCallReply("write_file", '{"path": "a", ')]
            ),
            Reply(text="ok"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    entries = await mesh.entries(started.session_id)
    calls = [e.item.tool_call for e in entries if e.item.HasField("tool_call")]
    assert calls[1].arguments == "" and calls[1].invalid_arguments == '{"path": "a", '
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert results[0].content == "Tool 'teleport' not found." and results[0].is_error
    assert results[1].is_error and "not a valid JSON object" in results[1].content
    second = json.dumps(mesh.emu.requests[-1][1])
    assert "invalid_json" in second and "Tool 'teleport' not found." in second


async def test_no_tool_call_and_truncated_replies_are_nudged(mesh):
    mesh.emu.script(
        [
            Reply(text="", stop="end_turn"),
            Reply(
                text="partial", tool_calls=[ToolCallReply("write_file", '{"path": "x"')], stop="max_tokens"
            ),
            Reply(text="the answer"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    final = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert final.final_output == "the answer" and final.turns == 3
    from agentrt.core.render import NUDGE_NO_TOOL_CALL, NUDGE_TRUNCATED

    last = json.dumps(mesh.emu.requests[-1][1])
    assert NUDGE_NO_TOOL_CALL in last and NUDGE_TRUNCATED in last
    calls = [e for e in await mesh.entries(started.session_id) if e.item.HasField("tool_call")]
    assert calls == []  # the truncated call never became a call


async def test_single_call_mode_runs_the_first_and_names_the_rest(mesh):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[ToolCallReply("list_files", "{}"), ToolCallReply("read_file", '{"path": "a"}')]
            ),
            Reply(text="ok"),
        ]
    )
    spec = agent(tool_call_mode=pb.TOOL_CALL_MODE_SINGLE)
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    entries = await mesh.entries(started.session_id)
    assert len([e for e in entries if e.item.HasField("tool_call")]) == 1
    reason = json.loads(entries[1].display.extra_json)["reason"]
    assert reason == "[1 further tool call(s) not executed: read_file]"


async def test_cancel_a_running_run(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="wait"))
    seen = await mesh.events(started.run_id, until="tool_called")
    assert seen[-1].WhichOneof("payload") == "tool_called"
    canceled = await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="user asked"))
    assert canceled.run.status == cpb.RUN_STATUS_CANCELED and canceled.run.phase == cpb.RUN_PHASE_CANCELED
    rest = await mesh.events(started.run_id, after_seq=seen[-1].seq)
    done = rest[-2].run_completed
    assert done.status == cpb.RUN_STATUS_CANCELED and not done.HasField("failure")  # not an error
    assert rest[-1].stream_end.status == cpb.RUN_STATUS_CANCELED
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id))
    assert (
        info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and reason_of(info.value) == "RUN_FINISHED"
    )


async def test_cancel_a_suspended_run(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')])])
    spec = agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    canceled = await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id))
    assert canceled.run.status == cpb.RUN_STATUS_CANCELED and not canceled.run.pending_calls
    events = await mesh.events(started.run_id)
    assert events[-1].WhichOneof("payload") == "stream_end"
    # the session is free for the next run
    mesh.emu.script([Reply(text="hello again")])
    again = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="hi", session_id=started.session_id)
    )
    assert (await mesh.wait_status(again.run_id, cpb.RUN_STATUS_COMPLETED)).final_output == "hello again"


async def test_tool_call_budget_answers_calls_over_it(mesh):
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("list_files", "{}"), ToolCallReply("list_files", "{}")]),
            Reply(text="ok"),
        ]
    )
    spec = agent(limits=pb.AgentLimits(max_tool_calls=1))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert [r.status for r in results] == [cpb.TOOL_RESULT_STATUS_OK, cpb.TOOL_RESULT_STATUS_NOT_EXECUTED]


async def test_a_workspace_the_tool_service_refuses_fails_the_run(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("list_files", "{}")])])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace="/nonexistent-parent/ws")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "invalid_workspace" and "workspace" in run.failure.message
