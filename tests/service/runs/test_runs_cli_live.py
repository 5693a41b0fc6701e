"""`agentrt run` against the in-process servers: what the live view shows, at 80 columns.

The command's own entry point (`agentrt.cli.main.main`) runs in a worker thread, as from a
shell, against the production servers over real channels; the emulator plays the model.
Handoffs are wired in the run loop today, so they are driven end to end here; child runs are
rendered from real event protos in tests/unit/cli/test_cli_render.py; a real run's guardrail
results are shown live in tests/service/runs/test_runs_guardrails_tools.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from rich.cells import cell_len

from agentrt.cli.main import main
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent
from tests.service.runs.sandbox_helpers import (
    docker_mesh,  # noqa: F401 - the fixture
    owned_containers,
    released,
)


async def run_cli(capsys, monkeypatch, mesh, *argv: str) -> tuple[int, list[str], str]:
    """Run `agentrt run ARGV` on an 80-column terminal; return (status, stdout lines, stderr)."""
    monkeypatch.setenv("COLUMNS", "80")
    code = await asyncio.to_thread(main, ["run", *argv, "--runs-addr", mesh.runs_address])
    out = capsys.readouterr()
    return code, out.out.splitlines(), " ".join(out.err.split())  # stderr wraps at 80 too


def fits(lines: list[str]) -> None:
    """Every line fits 80 columns, except one unbreakable token (a path printed whole, to copy)."""
    too_wide = [line for line in lines if cell_len(line) > 80 and len(line.split()) > 1]
    assert not too_wide, too_wide


async def register_pair(mesh) -> None:
    billing = agent(name="billing", instructions="You are billing.", tools=[pb.AgentTool(name="list_files")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=billing))
    triage = agent(
        name="triage",
        instructions="You are triage.",
        tools=[pb.AgentTool(name="read_file")],
        handoffs=["billing"],
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=triage))


async def test_agentrt_run_shows_a_handoff_live(mesh, capsys, monkeypatch):
    await register_pair(mesh)
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("read_file", '{"path": "missing.txt"}'),
                    ToolCallReply("transfer_to_billing", '{"topic": "an unpaid invoice"}'),
                    ToolCallReply("transfer_to_billing", "{}"),
                ]
            ),
            Reply(text="Billing here: your invoice is paid."),
        ]
    )
    code, lines, err = await run_cli(capsys, monkeypatch, mesh, "--agent", "triage", "my invoice?")
    assert code == 0, (lines, err)
    fits(lines)
    assert lines[0].startswith("run run_") and "agent triage" in " ".join(lines[:2])  # the header wraps
    called = [line for line in lines if line.startswith("→ transfer_to_billing (handoff)")]
    assert len(called) == 2  # both handoff calls are shown as called, flagged
    handoff = next(i for i, line in enumerate(lines) if line.startswith("⇒ handoff "))
    assert lines[handoff].startswith("⇒ handoff triage → billing v1  [call_")
    assert lines[handoff + 1] == '  input {"topic": "an unpaid invoice"}'
    assert lines[handoff + 2] == "  1 further handoff call ignored (the first wins)"
    # the regular tool ran first and returned; the handoff calls have no paired result
    returned = [line for line in lines if line.startswith("← ")]
    assert len(returned) == 1 and returned[0].startswith("← read_file")
    assert lines.index(returned[0]) < handoff
    turn2 = next(i for i, line in enumerate(lines) if " turn 2 · billing " in line)  # the target's turn
    assert turn2 > handoff and "Billing here: your invoice is paid." in lines[turn2 + 2 :]
    assert any(line.startswith("run run_") and " completed · session " in line for line in lines)


async def test_agentrt_run_refuses_inline_flags_with_a_registered_agent(mesh, capsys, monkeypatch):
    code, _, err = await run_cli(capsys, monkeypatch, mesh, "--agent", "triage", "--model", "openai:x", "hi")
    assert code == 2 and "--agent runs a registered one" in err
    code, _, err = await run_cli(capsys, monkeypatch, mesh, "--agent", "triage:0", "hi")
    assert code == 2 and "NAME:VERSION" in err
    code, _, err = await run_cli(capsys, monkeypatch, mesh, "--sandbox", "vm", "hi")
    assert code == 2 and "expected local or docker" in err
    code, _, err = await run_cli(capsys, monkeypatch, mesh, "--sandbox-env", "A=b", "hi")
    assert code == 2 and "need --sandbox" in err
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


async def test_agentrt_run_an_unknown_registered_agent_is_the_servers_refusal(mesh, capsys, monkeypatch):
    code, _, err = await run_cli(capsys, monkeypatch, mesh, "--agent", "nobody", "hi")
    assert code == 4 and "NOT_FOUND AGENT_NOT_FOUND" in err, err


async def test_agentrt_run_in_a_sandbox_of_its_own(mesh, capsys, monkeypatch):
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": 'echo "g=$GREETING"'}))]),
            Reply(text="ok"),
        ]
    )
    code, lines, err = await run_cli(
        capsys,
        monkeypatch,
        mesh,
        "--model",
        "openai:gpt-test",
        "--sandbox",
        "local",
        "--sandbox-env",
        "GREETING=from-the-cli",
        "say hi",
    )
    assert code == 0, (lines, err)
    fits(lines)
    assert "  g=from-the-cli" in lines
    sandbox_line = next(line for line in lines if line.startswith("sandbox sbx_"))
    assert sandbox_line.endswith("(released when the run ended)")
    (run,) = (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs
    assert sandbox_line.split()[1] == run.sandbox_id


async def test_agentrt_run_a_bad_sandbox_is_refused_before_anything_runs(mesh, capsys, monkeypatch):
    code, _, err = await run_cli(
        capsys,
        monkeypatch,
        mesh,
        "--model",
        "openai:gpt-test",
        "--sandbox",
        "local",
        "--sandbox-env",
        "1X=y",
        "hi",
    )
    assert code == 4 and "INVALID_ARGUMENT INVALID_VALUE" in err and "sandbox.env" in err, err
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
    assert tpb.SANDBOX_BACKEND_LOCAL  # the flag's backend name maps to this enum


async def test_runs_show_names_the_sandbox_and_approve_resumes_in_it(mesh, capsys, monkeypatch):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[ToolCallReply("write_file", json.dumps({"path": "note.txt", "content": "kept"}))]
            ),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "cat note.txt; pwd"}))]),
            Reply(text="done"),
        ]
    )
    spec = agent(
        tools=[pb.AgentTool(name="write_file"), pb.AgentTool(name="exec_command", needs_approval=True)]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=spec, input="go", sandbox=pb.RunSandbox(backend=tpb.SANDBOX_BACKEND_LOCAL))
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    monkeypatch.setenv("COLUMNS", "80")

    async def cli(*argv: str) -> tuple[int, str]:
        code = await asyncio.to_thread(main, [*argv, "--runs-addr", mesh.runs_address])
        return code, capsys.readouterr().out

    code, out = await cli("runs", "show", started.run_id)
    assert code == 0 and f"sandbox {run.sandbox_id}\n" in out
    code, out = await cli("approve", started.run_id)
    assert code == 0, out
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    code, out = await cli("runs", "show", started.run_id)
    assert f"sandbox {run.sandbox_id} (released when the run ended)" in out
    entries = await mesh.entries(started.session_id)
    cat = [e.item.tool_result.content for e in entries if e.item.HasField("tool_result")][-1]
    # written by the first executor, read after the approval by the next: one sandbox's workspace
    assert "kept" in cat and f"sandboxes/{run.sandbox_id}" in cat, cat


@pytest.mark.slow
async def test_agentrt_run_in_a_docker_sandbox(docker_mesh, capsys, monkeypatch):  # noqa: F811
    mesh = docker_mesh
    cmd = 'test -d /.agentrt && echo "in-the-image"; echo "g=$GREETING"'
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))]), Reply(text="ok")]
    )
    code, lines, err = await run_cli(
        capsys,
        monkeypatch,
        mesh,
        "--model",
        "openai:gpt-test",
        "--sandbox",
        "docker",
        "--sandbox-env",
        "GREETING=from-docker",
        "look around",
    )
    assert code == 0, (lines, err)
    fits(lines)
    assert "  in-the-image" in lines and "g=from-docker" in lines
    (run,) = (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs
    await released(mesh, run.sandbox_id)
    assert await asyncio.to_thread(owned_containers, mesh.docker_owner) == []  # the container is gone


async def test_a_detached_run_with_needs_approval_waits_for_agentrt_approve(
    mesh, capsys, monkeypatch, tmp_path
):
    """`agentrt run --detach --needs-approval exec_command`: the run suspends on the call; the
    newcomer's path to `agentrt approve` (README) then runs the command once and completes."""
    workspace = tmp_path / "ws"
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo once >> log.txt"}))]),
            Reply(text="wrote it"),
        ]
    )
    code, lines, err = await run_cli(
        capsys, monkeypatch, mesh, "append once", "--model", "openai:gpt-test",
        "--needs-approval", "exec_command", "--detach", "--workspace", str(workspace),
    )  # fmt: skip
    assert code == 0, err
    run_id = lines[0].split()[1]
    assert lines[0].startswith("run run_") and "session" in lines[0]
    run = await mesh.wait_status(run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_SUSPENDED and not (workspace / "log.txt").exists()
    assert [p.call.name for p in run.pending_calls] == ["exec_command"]
    code = await asyncio.to_thread(main, ["approve", run_id, "--runs-addr", mesh.runs_address])
    assert code == 0
    run = await mesh.wait_status(run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "wrote it"
    assert (workspace / "log.txt").read_text() == "once\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--needs-approval", "rm_rf"],
        ["--needs-approval", "exec_command", "--agent", "someone"],
    ],
)
async def test_needs_approval_refuses_a_tool_the_inline_agent_lacks(mesh, capsys, monkeypatch, argv):
    code, _, err = await run_cli(capsys, monkeypatch, mesh, "task", "--detach", *argv)
    assert code == 2 and "--needs-approval" in err
    assert not (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs  # nothing started
