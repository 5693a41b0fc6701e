"""exec_command through the real service: results, output cap, streaming, and the endings
(sandbox timeout, caller deadline, explicit cancel) that must answer differently (004 §2.7m);
a caller that goes away is no ending at all: the call runs on."""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest
from tools_helpers import make_workspace, pids_with, until

from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

TIMED_OUT = common_pb2.TOOL_RESULT_STATUS_TIMED_OUT
INTERRUPTED = common_pb2.TOOL_RESULT_STATUS_INTERRUPTED


def _marker() -> str:
    return f"agentrt-mark-{os.urandom(6).hex()}"


def _spawn_grandchild(marker: str) -> str:
    """Shell text that leaves a setsid'd grandchild named marker running."""
    return f"setsid bash -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 &"


async def test_exec_writes_a_file_in_the_workspace(tools):
    result = await tools.sh("echo hello > out.txt && mkdir -p sub && echo nested > sub/n.txt && echo done")
    assert not result.is_error, result.content
    assert result.status == common_pb2.TOOL_RESULT_STATUS_OK
    assert result.content == "done\n"
    assert result.exit_code == 0
    assert (tools.workspace / "out.txt").read_text() == "hello\n"
    assert (tools.workspace / "sub" / "n.txt").read_text() == "nested\n"
    assert result.duration.ToNanoseconds() > 0


async def test_nonzero_exit_is_an_error_result_with_output(tools):
    result = await tools.sh("echo to-out; echo to-err >&2; exit 3")
    assert result.is_error
    assert result.status == common_pb2.TOOL_RESULT_STATUS_ERROR
    assert result.exit_code == 3
    assert "to-out" in result.content and "to-err" in result.content
    assert "exit status 3" in result.content


async def test_workdir_is_relative_to_the_workspace(tools):
    (make_workspace(tools.workspace) / "a" / "b").mkdir(parents=True)
    resp = await tools.run("exec_command", {"cmd": "pwd", "workdir": "a/b"})
    assert resp.result.content.strip() == str(tools.workspace / "a" / "b")
    escaped = await tools.run("exec_command", {"cmd": "pwd", "workdir": "../"}, call_id="c2")
    assert escaped.result.is_error
    assert json.loads(escaped.result.details_json)["reason"] == "PATH_OUTSIDE_WORKSPACE"


async def test_default_workspace_is_per_run(tools):
    call = common_pb2.ToolCall(call_id="c1", name="exec_command", arguments='{"cmd": "pwd; echo x > f"}')
    resp = await tools.stub.ExecuteTool(pb.ExecuteToolRequest(run_id="run_default", call=call))
    root = os.path.realpath(tools.config.resolved_workspace_root)
    expected = os.path.join(root, "default", "runs", "run_default")
    assert resp.result.content.strip() == expected
    assert open(os.path.join(expected, "f")).read() == "x\n"


async def test_output_cap_keeps_head_and_tail_with_marker(tools):
    result = await tools.sh("seq 1 200000", max_output_bytes=1000)
    assert result.output_truncated
    assert result.content.startswith("1\n2\n3\n")
    assert result.content.endswith("199999\n200000\n")
    assert "bytes of output dropped" in result.content
    assert len(result.content) < 1200
    assert json.loads(result.details_json)["output_bytes"] == len("\n".join(map(str, range(1, 200001)))) + 1


async def test_stream_sends_progress_then_the_result(tools):
    req = tools.request("exec_command", {"cmd": "for i in 1 2 3; do echo line$i; done; echo oops >&2"})
    events = [e async for e in tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req))]
    assert events[-1].WhichOneof("event") == "result"
    assert all(e.WhichOneof("event") == "progress" for e in events[:-1])
    stdout = "".join(e.progress.text for e in events[:-1] if e.progress.stream == "stdout")
    stderr = "".join(e.progress.text for e in events[:-1] if e.progress.stream == "stderr")
    assert stdout == "line1\nline2\nline3\n"
    assert stderr == "oops\n"
    result = events[-1].result.result
    assert "line3" in result.content and "oops" in result.content  # streaming cost no output
    assert not events[-1].result.replayed


async def test_sandbox_timeout_kills_everything_and_says_timed_out(tools):
    marker = _marker()
    req = tools.request(
        "exec_command", {"cmd": f"{_spawn_grandchild(marker)} echo started; sleep 300"}, timeout=1.5
    )
    stream = tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req))
    seen_alive = False
    final = None
    async for event in stream:
        if event.WhichOneof("event") == "progress" and "started" in event.progress.text:
            # host side: the setsid'd grandchild is really running
            seen_alive = bool(await until(lambda: pids_with(marker), "the grandchild to appear"))
        elif event.WhichOneof("event") == "result":
            final = event.result.result
    assert seen_alive
    assert final is not None
    assert final.status == TIMED_OUT
    assert final.is_error
    assert "started" in final.content  # output collected before the kill is kept
    assert "timed out" in final.content
    assert pids_with(marker) == []  # gone by the time the result is out, grandchild included


async def test_exit_leaves_no_process_behind(tools):
    marker = _marker()
    result = await tools.sh(f"{_spawn_grandchild(marker)} echo bye")
    assert result.content == "bye\n"
    assert pids_with(marker) == []


async def test_caller_deadline_is_not_a_timeout(tools):
    marker = _marker()
    req = tools.request(
        "exec_command", {"cmd": f"exec -a {marker} sleep 300"}, call_id="c_deadline", timeout=60
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.ExecuteTool(req, timeout=1.0)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    async def recorded():
        got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_deadline"))
        return got if got.state == pb.EXECUTION_STATE_FINISHED else None

    got = await until(recorded, "the journal to record the ending")
    assert got.result.status == INTERRUPTED
    assert json.loads(got.result.details_json)["reason"] == "CALLER_DEADLINE"
    await until(lambda: not pids_with(marker), "the command to be killed")


async def test_a_caller_that_goes_away_leaves_the_call_running(tools):
    """A call outlives its caller: the command ends on its own, journaled (DESIGN step 3)."""
    req = tools.request(
        "exec_command", {"cmd": "sleep 0.5; echo ran >> once.txt; echo finished"}, call_id="c_gone"
    )
    call = tools.stub.ExecuteTool(req)

    async def started():
        got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_gone"))
        return got.state == pb.EXECUTION_STATE_STARTED

    await until(started, "the call to start")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # the repeat attaches to the execution in progress and gets its real result
    again = await tools.stub.ExecuteTool(req)
    assert again.replayed
    assert again.result.status == common_pb2.TOOL_RESULT_STATUS_OK
    assert again.result.content == "finished\n"
    assert (tools.workspace / "once.txt").read_text() == "ran\n"


async def test_cancel_execution_kills_the_call_and_journals_it(tools):
    marker = _marker()
    req = tools.request(
        "exec_command", {"cmd": f"exec -a {marker} sleep 300"}, call_id="c_cancel", timeout=60
    )
    call = tools.stub.ExecuteTool(req)
    await until(lambda: pids_with(marker), "the command to start")
    cancelled = await tools.stub.CancelExecution(
        pb.CancelExecutionRequest(run_id="run_1", call_id="c_cancel", reason="the run was cancelled")
    )
    assert cancelled.state == pb.EXECUTION_STATE_FINISHED
    assert cancelled.result.status == INTERRUPTED
    assert json.loads(cancelled.result.details_json)["reason"] == "CALLER_CANCELLED"
    # the caller still listening gets the journaled ending as its result
    answered = await call
    assert answered.result.status == INTERRUPTED
    await until(lambda: not pids_with(marker), "the command to be killed")
    # a repeat answers from the record, never runs again
    again = await tools.stub.ExecuteTool(req)
    assert again.replayed and again.result.status == INTERRUPTED


async def test_cancel_before_the_call_means_it_never_starts(tools):
    req = tools.request("exec_command", {"cmd": "echo ran >> late.txt"}, call_id="c_late")
    cancelled = await tools.stub.CancelExecution(pb.CancelExecutionRequest(run_id="run_1", call_id="c_late"))
    assert cancelled.state == pb.EXECUTION_STATE_FINISHED
    assert cancelled.result.status == common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED
    late = await tools.stub.ExecuteTool(req)
    assert late.replayed and late.result.status == common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED
    assert not (tools.workspace / "late.txt").exists()


async def test_a_new_attempt_runs_the_call_once_more(tools):
    """A reconciliation's "run it again" is attempt 1: its own record, one more execution."""
    args = {"cmd": "echo ran >> twice.txt; wc -l < twice.txt"}
    first = await tools.run("exec_command", args, call_id="c_again")
    again = await tools.stub.ExecuteTool(
        pb.ExecuteToolRequest(
            run_id="run_1", call=first_call(tools, args, "c_again"), workspace=str(tools.workspace), attempt=1
        )
    )
    assert not again.replayed and again.result.content.strip() == "2"
    repeat = await tools.stub.ExecuteTool(
        pb.ExecuteToolRequest(
            run_id="run_1", call=first_call(tools, args, "c_again"), workspace=str(tools.workspace), attempt=1
        )
    )
    assert repeat.replayed and repeat.result.content.strip() == "2"
    assert first.result.content.strip() == "1"
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_again", attempt=1))
    assert got.state == pb.EXECUTION_STATE_FINISHED and got.result.content.strip() == "2"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_again", attempt=-1))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def first_call(tools, args: dict, call_id: str):
    return tools.request("exec_command", args, call_id=call_id).call


async def test_model_timeout_ms_is_capped_by_the_request_timeout(tools):
    result = await tools.sh("sleep 30", timeout=1.0)
    assert result.status == TIMED_OUT
    resp = await tools.run("exec_command", {"cmd": "sleep 30", "timeout_ms": 300}, call_id="c_ms", timeout=20)
    assert resp.result.status == TIMED_OUT
    assert json.loads(resp.result.details_json)["timeout_seconds"] == pytest.approx(0.3)


async def test_stream_errors_and_replays(tools):
    bad = tools.request("no_such_tool", {})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=bad)):
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    req = tools.request("exec_command", {"cmd": "echo once >> once.txt; echo ok"}, call_id="c_stream")
    first = [e async for e in tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req))]
    again = [e async for e in tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req))]
    assert len(again) == 1 and again[0].result.replayed  # a replay streams only its result
    assert again[0].result.result.content == first[-1].result.result.content == "ok\n"
    assert (tools.workspace / "once.txt").read_text() == "once\n"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"cmd": "echo a\u0000b > nul.txt"}, "cmd"),
        ({"cmd": "echo a > nul.txt", "workdir": "sub\u0000"}, "workdir"),
        ({"cmd": "echo a > nul.txt", "session_id": "s\u0000"}, "session_id"),
    ],
)
async def test_nul_characters_are_refused_as_a_result_before_anything_runs(tools, args, field):
    resp = await tools.run("exec_command", args, call_id="c_nul")
    result = resp.result
    assert result.is_error and result.status == common_pb2.TOOL_RESULT_STATUS_ERROR, result.content
    facts = json.loads(result.details_json)
    assert facts["reason"] == "INVALID_ARGUMENTS"
    assert "NUL" in result.content and f'"{field}"' in result.content
    # journaled as a plain refusal: FINISHED with that result, never INTERRUPTED
    record = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_nul"))
    assert record.state == pb.EXECUTION_STATE_FINISHED and record.result.status == result.status
    again = await tools.run("exec_command", args, call_id="c_nul")
    assert again.replayed and again.result.content == result.content
    assert not (tools.workspace / "nul.txt").exists()


async def test_a_one_shot_command_over_linux_argument_limit_is_refused_clearly_and_a_shell_runs_it(tools):
    """`bash -c <cmd>` carries the command as one argument: Linux caps it at 128 KiB.

    Found by a break-it session: the one-shot command failed as "Argument list too long"
    (OS_ERROR), telling the model nothing it could act on, while the same text ran in a named
    shell. Now it is INVALID_ARGUMENTS naming the limit and the ways around it.
    """
    from agentrt.tools.execution.dispatch import MAX_ONE_SHOT_COMMAND_BYTES

    cmd = "echo " + "a" * 200_000 + " | wc -c"
    in_shell = await tools.run("exec_command", {"cmd": cmd, "session_id": "long"}, call_id="c_long_shell")
    assert in_shell.result.status == common_pb2.TOOL_RESULT_STATUS_OK, in_shell.result.content
    assert in_shell.result.content.strip() == "200001"
    one_shot = await tools.run("exec_command", {"cmd": cmd}, call_id="c_long_once")
    assert one_shot.result.is_error and one_shot.result.exit_code == 0
    assert json.loads(one_shot.result.details_json)["reason"] == "INVALID_ARGUMENTS"
    assert f"{MAX_ONE_SHOT_COMMAND_BYTES} bytes" in one_shot.result.content
    assert "session_id" in one_shot.result.content and "write_file" in one_shot.result.content
    at_limit = "echo " + "b" * (MAX_ONE_SHOT_COMMAND_BYTES - len("echo  | wc -c")) + " | wc -c"
    fits = await tools.run("exec_command", {"cmd": at_limit}, call_id="c_at_limit")
    assert fits.result.status == common_pb2.TOOL_RESULT_STATUS_OK, fits.result.content[-300:]
