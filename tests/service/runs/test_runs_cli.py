"""`agentrt runs`, `runs show`, `approve` and `stop` against the in-process servers.

The command's own entry point (`agentrt.cli.main.main`, argument parsing to exit status)
runs in a worker thread with its own event loop, as it does from a shell, talking to the
production servers over real channels.
"""

from __future__ import annotations

import asyncio
import json

from agentrt.cli.main import main
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent


async def cli(capsys, mesh, *argv: str) -> tuple[int, str, str]:
    """Run `agentrt ARGV --runs-addr <the test's RunService>`; return (status, stdout, stderr)."""
    code = await asyncio.to_thread(main, [*argv, "--runs-addr", mesh.runs_address])
    out = capsys.readouterr()
    return code, out.out, out.err


async def suspended_with_two_approvals(mesh) -> tuple[str, list[pb.PendingCall]]:
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("list_files", '{"path": "."}'),
                    ToolCallReply("read_file", '{"path": "a"}'),
                ]
            ),
            Reply(text="done after approvals"),
        ]
    )
    spec = agent(
        tools=[
            pb.AgentTool(name="list_files", needs_approval=True),
            pb.AgentTool(name="read_file", needs_approval=True),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="look around"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    return started.run_id, list(run.pending_calls)


async def test_runs_lists_newest_first_and_filters(mesh, capsys):
    code, out, _ = await cli(capsys, mesh, "runs")
    assert (code, out.strip()) == (0, "no runs")
    ids = []
    for text in ("one", "two"):
        mesh.emu.script([Reply(text=text)])
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input=text))
        await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
        ids.append((started.run_id, started.session_id))
    code, out, _ = await cli(capsys, mesh, "runs")
    lines = out.strip().splitlines()
    assert code == 0 and [line.split()[0] for line in lines] == [ids[1][0], ids[0][0]]
    assert "completed" in lines[0] and "turns 1" in lines[0] and f"session {ids[1][1]}" in lines[0]
    code, out, _ = await cli(capsys, mesh, "runs", "--session", ids[0][1])
    assert [line.split()[0] for line in out.strip().splitlines()] == [ids[0][0]]
    code, out, _ = await cli(capsys, mesh, "runs", "--limit", "1")
    assert len(out.strip().splitlines()) == 1


async def test_runs_show_prints_the_record_and_the_pending_calls(mesh, capsys):
    run_id, pending = await suspended_with_two_approvals(mesh)
    code, out, _ = await cli(capsys, mesh, "runs", "show", run_id)
    assert code == 0
    assert f"run {run_id}" in out and "status suspended" in out and "pending calls (2):" in out
    first, second = pending[0].call, pending[1].call
    assert f'{first.call_id}  list_files  waits for approval  arguments {{"path": "."}}' in out
    assert f'{second.call_id}  read_file  waits for approval  arguments {{"path": "a"}}' in out
    code, _, err = await cli(capsys, mesh, "runs", "show", "run_unknown")
    assert code == 4 and "NOT_FOUND RUN_NOT_FOUND" in err


async def test_approve_answers_every_approval_denying_the_named_ones(mesh, capsys):
    run_id, pending = await suspended_with_two_approvals(mesh)
    keep, deny = pending[0].call, pending[1].call
    code, out, _ = await cli(
        capsys, mesh, "approve", run_id, "--deny", deny.call_id, "--reason", "not that file"
    )
    assert code == 0
    assert (
        f"approved {keep.call_id} list_files" in out
        and f"denied {deny.call_id} read_file (not that file)" in out
    )
    run = await mesh.wait_status(run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "done after approvals"
    entries = await mesh.entries(run.session_id)
    results = {
        e.item.tool_result.call_id: e.item.tool_result for e in entries if e.item.HasField("tool_result")
    }
    assert results[deny.call_id].status == cpb.TOOL_RESULT_STATUS_DENIED
    assert "not that file" in results[deny.call_id].content
    assert results[keep.call_id].status == cpb.TOOL_RESULT_STATUS_OK
    assert "not that file" in json.dumps(mesh.emu.requests[-1][1])  # the model was told why
    # the run is no longer suspended: nothing to approve
    code, _, err = await cli(capsys, mesh, "approve", run_id)
    assert code == 1 and "completed, not suspended" in err


async def test_approve_refuses_a_call_that_is_not_waiting_and_changes_nothing(mesh, capsys):
    run_id, pending = await suspended_with_two_approvals(mesh)
    code, _, err = await cli(capsys, mesh, "approve", run_id, "--deny", "call_nope")
    assert code == 2 and "call_nope not waiting for approval" in err and pending[0].call.call_id in err
    code, _, err = await cli(capsys, mesh, "approve", run_id, "--reason", "why")
    assert code == 2 and "--deny" in err
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED and len(run.pending_calls) == 2


async def test_approve_leaves_client_results_to_the_client(mesh, capsys):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("mine", "{}")])])
    spec = agent(
        tools=[pb.AgentTool(name="mine", spec=cpb.ToolSpec(external=True, description="client tool"))]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    code, _, err = await cli(capsys, mesh, "approve", started.run_id)
    assert code == 1 and "waits for a client's result" in err
    code, out, _ = await cli(capsys, mesh, "runs", "show", started.run_id)
    assert "mine  waits for client result" in out


async def test_stop_after_turn_on_a_finished_run_and_bad_usage(mesh, capsys):
    mesh.emu.script([Reply(text="finished")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    code, _, err = await cli(capsys, mesh, "stop", started.run_id, "--after-turn", "--reason", "enough")
    assert code == 1 and "has already finished" in err
    code, _, err = await cli(capsys, mesh, "stop", started.run_id)
    assert code == 2 and "--after-turn" in err
    code, _, err = await cli(capsys, mesh, "stop", "run_unknown", "--after-turn")
    assert code == 4 and "RUN_NOT_FOUND" in err


async def test_an_unreachable_mesh_is_exit_4(capsys):
    code = await asyncio.to_thread(main, ["runs", "--runs-addr", "127.0.0.1:1"])
    assert code == 4 and "is the mesh running?" in capsys.readouterr().err
