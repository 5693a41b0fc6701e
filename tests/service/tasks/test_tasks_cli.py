"""`agentrt tasks` against a real TaskService: list, stop, retry, and its exit statuses."""

from __future__ import annotations

import asyncio

import pytest

from agentrt.cli.main import main
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply


@pytest.fixture
async def backend() -> str:
    """The command is a client: one backend is enough."""
    return "sqlite"


async def _agentrt(capsys, *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_list_stop_and_retry(tm, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    parent = await tm.parent()
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])])
    live = await tm.spawn(parent, label="long job", kind="research")
    await tm.mesh.events(live.run_id, until="tool_called")
    code, out, _ = await _agentrt(capsys, "tasks", "--session", parent, "--tasks-addr", tm.address)
    assert code == 0 and live.task_id in out and "working" in out and "research / long job" in out
    code, out, _ = await _agentrt(capsys, "tasks", "stop", live.task_id, "--tasks-addr", tm.address)
    assert code == 0 and f"task {live.task_id}: canceled" in out
    tm.mesh.emu.script([ErrorReply(status=400)])
    failed = await tm.spawn(parent)
    await tm.wait_task(failed.task_id, pb.TASK_STATUS_FAILED)
    tm.mesh.emu.script([Reply(text="ok")])
    code, out, _ = await _agentrt(capsys, "tasks", "retry", failed.task_id, "--tasks-addr", tm.address)
    assert code == 0 and "attempt 2/3 started" in out
    code, out, _ = await _agentrt(capsys, "tasks", "--tasks-addr", tm.address)  # every task of the tenant
    assert code == 0 and live.task_id in out and failed.task_id in out


async def test_refusals_and_bad_arguments(tm, capsys):
    code, _, err = await _agentrt(capsys, "tasks", "retry", "tsk_unknown", "--tasks-addr", tm.address)
    assert code == 4 and "NOT_FOUND TASK_NOT_FOUND" in err
    code, _, err = await _agentrt(capsys, "tasks", "stop", "--tasks-addr", tm.address)
    assert code == 2 and "the task ID is required" in err
    code, _, err = await _agentrt(capsys, "tasks", "list", "tsk_x", "--tasks-addr", tm.address)
    assert code == 2
    code, out, _ = await _agentrt(capsys, "tasks", "--session", await tm.parent(), "--tasks-addr", tm.address)
    assert code == 0 and "no tasks" in out
    code, _, err = await _agentrt(capsys, "tasks", "--tasks-addr", "127.0.0.1:1")
    assert code == 4 and "is the mesh running?" in err


async def test_run_shows_a_tasks_spawn_and_its_result_card_live(tm, capsys, monkeypatch):
    import json

    monkeypatch.setenv("COLUMNS", "200")

    def respond(path, body):
        text = json.dumps(body)
        if "CHILD-CLI" in text and "PARENT-CLI" not in text:
            return Reply(text="the child found 42")
        if "PARENT-CLI" not in text:
            return None
        if "[task wake]" in text:
            return Reply(text="noted")
        if "function_call_output" not in text:
            return Reply(
                tool_calls=[ToolCallReply("spawn_task", '{"input": "CHILD-CLI go", "label": "finder"}')]
            )
        return Reply(text="spawned it")

    tm.mesh.emu.responder = respond
    code, out, err = await _agentrt(
        capsys, "run", "PARENT-CLI go", "--tasks", "--model", "openai:gpt-test",
        "--runs-addr", tm.mesh.runs_address, "--tasks-addr", tm.address,
    )  # fmt: skip
    assert code == 0, err
    assert "⇢ task finder spawned" in out
    card = out[out.index("task finder: completed") :]
    assert "the child found 42" in card and "attempt 1/3" in card


async def test_the_list_keeps_the_label_on_an_80_column_terminal(tm, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parent = await tm.parent()
    tm.mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 30"}')])])
    live = await tm.spawn(parent, label="long job", kind="research")
    await tm.mesh.events(live.run_id, until="tool_called")
    code, out, _ = await _agentrt(capsys, "tasks", "--session", parent, "--tasks-addr", tm.address)
    assert code == 0 and live.task_id in out and "working" in out
    assert "long job" in out, out
    code, _, _ = await _agentrt(capsys, "tasks", "stop", live.task_id, "--tasks-addr", tm.address)
