"""Acceptance of issue 2: a real run over the five processes against the provider emulator.

For OpenAI and Anthropic each: an agent calls exec_command to write a file, then answers.
Checked: the file is in the workspace, the events arrived in seq order with stream_end last,
the session holds the user input, both tool items and the answer, and the run completed.
Also through the `agentrt run` command: exit 0 on success, non-zero with the structured
failure on a failing run.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from e2e_helpers import STATE_TIMEOUT, agentrt, output_of
from rich.console import Console

from agentrt.cli.run import build_agent, follow_run, terminal_approver
from agentrt.client.channels import MeshClient
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply
from tests.ports import free_ports

pytestmark = pytest.mark.slow

MODELS = {"openai": "gpt-test", "anthropic": "claude-test"}
COMMAND_ARGS = '{"cmd": "printf \'written by %s\' agentrt > note.txt"}'


async def _entries(address: str, session_id: str) -> list[spb.Entry]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = spb_grpc.SessionServiceStub(channel)
        resp = await stub.ListEntries(spb.ListEntriesRequest(session=spb.SessionRef(session_id=session_id)))
        return list(resp.entries)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_agent_writes_a_file_with_exec_command_then_answers(emulated_mesh, tmp_path, provider):
    emu = emulated_mesh.emu
    emu.script(
        [
            Reply(text="I will write the note.", tool_calls=[ToolCallReply("exec_command", COMMAND_ARGS)]),
            Reply(text="Done: note.txt is written."),
        ]
    )
    workspace = tmp_path / "workspace"
    task = "Write a note into note.txt, then say done."
    request = pb.StartRunRequest(
        agent=build_agent(cpb.ModelRef(provider=provider, model=MODELS[provider]), max_turns=5),
        input=task,
        workspace=str(workspace),
    )
    screen = io.StringIO()
    console = Console(file=screen, width=120)
    client = MeshClient(runs=emulated_mesh.runs)
    try:
        outcome = await asyncio.wait_for(
            follow_run(client, request, console, terminal_approver(console, False, False)), STATE_TIMEOUT
        )
    finally:
        await client.close()

    # the file exists in the workspace
    assert (workspace / "note.txt").read_text() == "written by agentrt"

    # events in seq order, run_completed then stream_end last
    events = outcome.events
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] == 1
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "stream_end" and kinds[-2] == "run_completed"
    assert events[-1].stream_end.status == cpb.RUN_STATUS_COMPLETED
    called = [e.tool_called.call for e in events if e.HasField("tool_called")]
    assert [(c.name, c.arguments) for c in called] == [("exec_command", COMMAND_ARGS)]
    returned = [e.tool_returned.result for e in events if e.HasField("tool_returned")]
    assert (
        len(returned) == 1 and returned[0].status == cpb.TOOL_RESULT_STATUS_OK and returned[0].exit_code == 0
    )

    # the run record, read right after stream_end (it is committed before stream_end is sent)
    async with grpc.aio.insecure_channel(emulated_mesh.runs) as channel:
        stub = pb_grpc.RunServiceStub(channel)
        run = (await stub.GetRun(pb.GetRunRequest(run_id=outcome.run.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.phase == cpb.RUN_PHASE_COMPLETED
    assert run.final_output == "Done: note.txt is written."
    assert run.turns == 2

    # the session: user input, the tool call and its result, the answer
    entries = await _entries(emulated_mesh.sessions, run.session_id)
    seqs = [e.seq for e in entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    items = [e.item for e in entries if e.kind == "item"]
    user = [i for i in items if i.message.role == cpb.ROLE_USER]
    assert user and user[0].message.content[0].text.text == task
    calls = [i.tool_call for i in items if i.HasField("tool_call")]
    results = [i.tool_result for i in items if i.HasField("tool_result")]
    assert [(c.name, c.arguments) for c in calls] == [("exec_command", COMMAND_ARGS)]
    assert [r.call_id for r in results] == [calls[0].call_id]
    assert results[0].status == cpb.TOOL_RESULT_STATUS_OK
    answers = [i.message for i in items if i.message.role == cpb.ROLE_ASSISTANT]
    assert answers[-1].content[-1].text.text == "Done: note.txt is written."
    assert {e.turn for e in entries if e.item.HasField("tool_call")} == {1}
    assert entries[-1].turn == 2

    # the live view showed the call with its arguments and the answer
    shown = screen.getvalue()
    assert "exec_command" in shown and "note.txt" in shown and "Done: note.txt is written." in shown

    # the second provider request replayed the call under the runtime's call id
    assert emu.pending == 0
    assert calls[0].call_id in json.dumps(emu.requests[-1][1])


def _run_cli(tmp_path: Path, emulated_mesh, *args: str) -> tuple[int, str]:
    proc = agentrt("run", *args, "--runs-addr", emulated_mesh.runs, env=emulated_mesh.env(), cwd=tmp_path)
    code = proc.wait(timeout=STATE_TIMEOUT)
    return code, output_of(tmp_path)


def test_agentrt_run_command_shows_the_run_and_exits_zero(emulated_mesh, tmp_path):
    emulated_mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi > hi.txt && cat hi.txt"}')]),
            Reply(text="hi.txt says hi"),
        ]
    )
    workspace = tmp_path / "ws"
    code, out = _run_cli(
        tmp_path,
        emulated_mesh,
        "say hi into hi.txt",
        "--model",
        "openai:gpt-test",
        "--workspace",
        str(workspace),
    )
    assert code == 0, out
    assert (workspace / "hi.txt").read_text() == "hi\n"
    for shown in (
        "turn 1",
        "turn 2",
        "exec_command",
        "echo hi > hi.txt",
        "hi.txt says hi",
        "completed",
        "usage",
    ):
        assert shown in out, f"{shown!r} missing from:\n{out}"


def test_agentrt_run_reads_the_task_from_stdin_and_names_the_default_workspace(emulated_mesh, tmp_path):
    emulated_mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi > hi.txt"}')]),
            Reply(text="written"),
        ]
    )
    task = "write hi.txt " + "x" * (200 * 1024)  # past one argv string's limit (128 KiB)
    env = {**os.environ, **emulated_mesh.env(), "AGENTRT_STATE_DIR": str(emulated_mesh.root / "state")}
    env.pop("AGENTRT_WORKSPACE_ROOT", None)
    env.pop("AGENTRT_TENANT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "agentrt.cli.main", "run", "-", "--model", "openai:gpt-test"],
        input=task.encode(),
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=STATE_TIMEOUT,
    )
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out
    # the emulator saw the whole task, and the output says where the file went
    assert task in json.dumps(emulated_mesh.emu.requests[-1][1])
    line = next((ln for ln in out.splitlines() if ln.startswith("workspace ")), None)
    assert line is not None, out
    workspace = Path(line.removeprefix("workspace ").strip())
    assert workspace.parts[-3:-1] == ("default", "runs"), line
    assert (workspace / "hi.txt").read_text() == "hi\n"


def test_agentrt_run_command_exits_nonzero_with_the_structured_failure(emulated_mesh, tmp_path):
    emulated_mesh.emu.script([ErrorReply(status=401)])
    code, out = _run_cli(tmp_path, emulated_mesh, "anything", "--model", "anthropic:claude-test")
    assert code == 1, out
    assert "run failed" in out and "failure kind=" in out, out
    assert emulated_mesh.emu.pending == 0


def test_agentrt_run_command_reports_max_turns(emulated_mesh, tmp_path):
    emulated_mesh.emu.script([Reply(tool_calls=[ToolCallReply("list_files", "{}")])])
    code, out = _run_cli(tmp_path, emulated_mesh, "loop", "--model", "openai:gpt-test", "--max-turns", "1")
    assert code == 1, out
    assert "failure kind=max_turns" in out, out


def test_agentrt_run_command_without_a_mesh_says_so(tmp_path):
    (port,) = free_ports(1)
    proc = agentrt("run", "x", "--runs-addr", f"127.0.0.1:{port}", cwd=tmp_path)
    code = proc.wait(timeout=STATE_TIMEOUT)
    out = output_of(tmp_path)
    assert code == 4, out
    assert "UNAVAILABLE" in out and "agentrt up" in out, out


@pytest.mark.parametrize("approve", [True, False])
async def test_follow_run_answers_an_approval(emulated_mesh, tmp_path, approve):
    emulated_mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo ok > approved.txt"}')]),
            Reply(text="finished"),
        ]
    )
    agent = build_agent(cpb.ModelRef(provider="openai", model="gpt-test"), max_turns=4)
    del agent.tools[:]
    agent.tools.add(name="exec_command", needs_approval=True)
    workspace = tmp_path / "ws"
    screen = io.StringIO()
    console = Console(file=screen, width=120)
    client = MeshClient(runs=emulated_mesh.runs)
    try:
        request = pb.StartRunRequest(agent=agent, input="needs approval", workspace=str(workspace))
        # approve_all=True approves; interactive=False without approve_all denies (no terminal)
        outcome = await asyncio.wait_for(
            follow_run(client, request, console, terminal_approver(console, approve, False)), STATE_TIMEOUT
        )
    finally:
        await client.close()
    kinds = [e.WhichOneof("payload") for e in outcome.events]
    assert "run_suspended" in kinds and "run_resumed" in kinds and kinds[-1] == "stream_end"
    assert outcome.completed and outcome.run.final_output == "finished"
    assert (workspace / "approved.txt").exists() is approve
    returned = [e.tool_returned.result for e in outcome.events if e.HasField("tool_returned")]
    expected = cpb.TOOL_RESULT_STATUS_OK if approve else cpb.TOOL_RESULT_STATUS_DENIED
    assert [r.status for r in returned] == [expected]
    if not approve:
        assert "no terminal to ask" in screen.getvalue()


def test_agentrt_run_command_continues_a_session(emulated_mesh, tmp_path):
    emulated_mesh.emu.script([Reply(text="first answer"), Reply(text="second answer")])
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    code, out = _run_cli(first, emulated_mesh, "first question", "--model", "openai:gpt-test")
    assert code == 0, out
    session = next(word for word in out.split() if word.startswith("ses_"))
    code, out = _run_cli(
        second, emulated_mesh, "second question", "--model", "openai:gpt-test", "--session", session
    )
    assert code == 0, out
    assert session in out
    # the second request carried the first exchange
    sent = json.dumps(emulated_mesh.emu.requests[-1][1])
    assert "first question" in sent and "first answer" in sent and "second question" in sent
