"""`agentrt reconcile RUN CALL` against the in-process servers, on a run really waiting for it.

The run gets there as in test_runs_reconcile.py: the model asks for commands with side
effects in one turn, and the tool service stops while they run (it journals them
interrupted: their outcome is unknown), so the run suspends with each call pending as a
reconciliation. The answers are given by `python -m agentrt.cli.main reconcile ...` in a
subprocess, as from a shell; the refusals (many, each checked to change nothing) run the
same entry point in a worker thread, as test_runs_cli.py does, to spare a process start each.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import agentrt
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.service.runs.harness import WAIT_S, Mesh
from tests.service.runs.test_runs_cli import cli, suspended_with_two_approvals
from tests.service.runs.test_runs_reconcile import lines_of, waiting_for_reconciliations

#: The `services` directory this test imports agentrt from (the subprocess must use the same code).
SERVICES = os.path.dirname(os.path.dirname(agentrt.__file__))


async def shell(mesh: Mesh, *argv: str) -> tuple[int, str, str]:
    """Run `python -m agentrt.cli.main ARGV --runs-addr <the test's RunService>` as a process."""
    env = {**os.environ, "PYTHONPATH": SERVICES, "COLUMNS": "200"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentrt.cli.main", *argv, "--runs-addr", mesh.runs_address,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_reconcile_answers_each_call_with_its_action_and_the_run_completes(
    start_server, tmp_path, emulator
):
    mesh, run_id, workspace, (again, supplied, supplied_error, failed) = await waiting_for_reconciliations(
        start_server, tmp_path, emulator, 4
    )

    code, out, err = await shell(mesh, "reconcile", run_id, again, "--run-again")
    assert (code, err) == (0, ""), err
    assert f"reconciled {again} exec_command: it runs once more" in out
    assert f"run {run_id} is suspended" in out  # three calls still wait
    assert f"still waiting: {supplied} (reconciliation), {supplied_error} (reconciliation), {failed}" in out
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    assert [p.call.call_id for p in run.pending_calls] == [supplied, supplied_error, failed]

    code, out, err = await shell(
        mesh, "reconcile", run_id, supplied, "--result", "checked: it wrote the file"
    )
    assert (code, err) == (0, ""), err
    assert f"reconciled {supplied} exec_command: the supplied result (26 characters) is its output" in out
    code, out, err = await shell(
        mesh, "reconcile", run_id, supplied_error, "--result", "disk full", "--error"
    )
    assert (code, err) == (0, ""), err
    assert "the supplied result (9 characters) is an error" in out
    assert f"still waiting: {failed} (reconciliation)" in out
    assert len(emulator.requests) == 1  # nothing resumed yet: the run waits for every answer

    code, out, err = await shell(mesh, "reconcile", run_id, failed, "--fail", "the operator rolled it back")
    assert (code, err) == (0, ""), err
    assert (
        f"reconciled {failed} exec_command: recorded as failed; the model reads: the operator rolled" in out
    )
    assert f"run {run_id} is " in out and "still waiting" not in out
    run = await mesh.wait_status(run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "done", run.failure

    # RUN_AGAIN ran its command exactly once more; the other three never ran again
    assert lines_of(workspace, 0) == "ran\nran\n"
    assert [lines_of(workspace, i) for i in (1, 2, 3)] == ["ran\n"] * 3
    results = {
        e.item.tool_result.call_id: e.item.tool_result
        for e in await mesh.entries(run.session_id)
        if e.item.HasField("tool_result")
    }
    assert set(results) == {again, supplied, supplied_error, failed}
    assert results[again].content == "finished 0\n" and results[again].status == cpb.TOOL_RESULT_STATUS_OK
    ok = results[supplied]
    assert (ok.content, ok.is_error, ok.status) == (
        "checked: it wrote the file",
        False,
        cpb.TOOL_RESULT_STATUS_OK,
    )
    bad = results[supplied_error]
    assert (bad.content, bad.is_error, bad.status) == ("disk full", True, cpb.TOOL_RESULT_STATUS_ERROR)
    assert results[failed].is_error and results[failed].status == cpb.TOOL_RESULT_STATUS_ERROR
    assert "marked it as failed: the operator rolled it back" in results[failed].content
    told = json.dumps(emulator.requests[-1][1])  # what the model read on its second turn
    for text in ("finished 0", "checked: it wrote the file", "disk full", "the operator rolled it back"):
        assert text in told, text

    # the run has finished: nothing to reconcile, and nothing changes
    code, out, err = await shell(mesh, "reconcile", run_id, failed, "--run-again")
    assert code == 1 and f"run {run_id} is completed, not suspended: nothing to reconcile" in err
    assert out == "" and len(err.strip().splitlines()) == 1
    assert lines_of(workspace, 3) == "ran\n"


async def test_reconcile_refusals_change_nothing(start_server, tmp_path, emulator, capsys):
    mesh, run_id, workspace, (call_id,) = await waiting_for_reconciliations(
        start_server, tmp_path, emulator, 1
    )

    async def refused(*argv: str) -> tuple[int, str]:
        code, out, err = await cli(capsys, mesh, *argv)
        # nothing done; the message is one line (checked where stderr is the command's alone:
        # the process above, tests/unit/cli; here the servers' logging may write there too)
        assert out == "", out
        return code, " ".join(err.split())

    # flags that do not say one action (exit 2), checked before anything is sent
    code, err = await refused("reconcile", run_id, call_id)
    assert code == 2 and "say exactly one of --run-again, --fail MESSAGE or --result TEXT" in err
    code, err = await refused("reconcile", run_id, call_id, "--run-again", "--fail", "no")
    assert code == 2 and "(got --run-again and --fail)" in err
    code, err = await refused("reconcile", run_id, call_id, "--fail", "no", "--result", "x")
    assert code == 2 and "(got --fail and --result)" in err
    code, err = await refused("reconcile", run_id, call_id, "--run-again", "--error")
    assert code == 2 and "--error" in err and "goes with --result TEXT" in err
    code, err = await refused("reconcile", run_id, call_id, "--fail", "  ")
    assert code == 2 and "--fail needs a MESSAGE" in err
    # a call that is not pending: the ones that wait are named
    code, err = await refused("reconcile", run_id, "call_nope", "--run-again")
    assert code == 2 and f"call call_nope of run {run_id} is not pending" in err and call_id in err
    # an unknown run: the server's status and reason
    code, err = await refused("reconcile", "run_unknown", call_id, "--run-again")
    assert code == 4 and "NOT_FOUND RUN_NOT_FOUND" in err
    # the server refuses the answer (a result over 2 MiB): its status and reason, nothing changes
    code, err = await refused("reconcile", run_id, call_id, "--result", "x" * (2 * 1024 * 1024 + 1))
    assert code == 4 and "INVALID_ARGUMENT REQUEST_TOO_LARGE" in err
    # approve leaves the call alone and says what answers it
    code, err = await refused("approve", run_id)
    assert code == 1 and f"{call_id} waits for a reconciliation" in err
    assert f"agentrt reconcile {run_id} CALL" in err

    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    assert [(p.call.call_id, p.kind) for p in run.pending_calls] == [
        (call_id, pb.PENDING_CALL_KIND_RECONCILIATION)
    ]
    assert lines_of(workspace, 0) == "ran\n" and len(emulator.requests) == 1
    # still answerable after all that
    code, out, _ = await cli(capsys, mesh, "reconcile", run_id, call_id, "--run-again")
    assert code == 0 and f"reconciled {call_id}" in out
    assert (await mesh.wait_status(run_id, cpb.RUN_STATUS_COMPLETED)).final_output == "done"
    assert lines_of(workspace, 0) == "ran\nran\n"


async def test_reconcile_points_a_call_waiting_for_approval_to_approve(mesh):
    run_id, pending = await suspended_with_two_approvals(mesh)
    call_id = pending[0].call.call_id
    code, out, err = await shell(mesh, "reconcile", run_id, call_id, "--run-again")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert (
        f"call {call_id} of run {run_id} waits for an approval, not a reconciliation: "
        f"answer it with `agentrt approve {run_id}`"
    ) in " ".join(err.split())
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED and len(run.pending_calls) == 2
    assert len(mesh.emu.requests) == 1
