"""CancelExecution landing in the two windows of a command's start (decision 0053).

Each test holds the real CancelExecution RPC at the journal (`CancelGate`) and lets it
through at one exact point of the call's start, on the real service over grpc.aio with a
real bubblewrap sandbox running `sleep 30`. The point is reached by the event loop's own
order: opening the gate schedules the held cancel before whatever the call does next, so
the cancel runs at the next step, deterministically.

- Window B: the STARTED record is written and the flight's task created, but that task has
  not taken its first step. A task cancelled then never runs its body: before the fix
  nothing ever ended the call (CancelExecution and ExecuteTool waited forever, the record
  stayed STARTED).
- Window A: inside `asyncio.create_subprocess_exec`, after the fork, while the pipes are
  being connected. asyncio's cancel path kills the launcher and waits for the output pipes,
  which the guard and the sandboxed command still hold when the guard outlived its launcher
  (unshare's fork-to-prctl window under load, seen in stack dumps: docs/testing.md). The test
  makes that outliving certain rather than lucky: the launcher asyncio sees is a stand-in
  (`bash -c '"$@" & wait'`) that runs the real launcher as its child, so killing it leaves
  the guard and the command running. Before the fix the guard was released only after that
  wait, so the cancel answered when `sleep 30` ended on its own.

Both bound the wait at BOUND_S (a third of the command's 30 s); before the fix both ran
into it. A shutdown is the other canceller: one that comes while the STARTED record is
written must still keep the call from running (before the fix it skipped such a call, which
then ran after the shutdown had begun, and its record stayed STARTED).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from asyncio import unix_events

import grpc
import pytest
from tools_helpers import ToolsEnv, make_config, pids_with, until

from agentrt.tools.execution.flight import Flight
from agentrt.tools.execution.journal import Journal
from agentrt.tools.server import build_server
from agentrt.tools.storage.store import CallKey, ToolStore
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

INTERRUPTED = common_pb2.TOOL_RESULT_STATUS_INTERRUPTED
NOT_EXECUTED = common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED
#: The bound on every wait for an answer, seconds (the command alone would take 30).
BOUND_S = 10.0
#: argv[0] of the stand-in launcher of window A.
STAND_IN = "agentrt-test-launcher"


def _marker() -> str:
    return f"agentrt-mark-{os.urandom(6).hex()}"


def _named(name: str) -> list[int]:
    """Host-side: pids whose argv[0] is name (the sandboxed `exec -a name sleep 30`)."""
    return [pid for pid in pids_with(name) if _argv0(pid) == name]


def _argv0(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


class CancelGate:
    """Holds CancelExecution of one call at the journal until `open`; the cancel itself is real."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, call_id: str) -> None:
        self.arrived = asyncio.Event()
        self.opened = asyncio.Event()
        real = Journal.cancel
        gate = self

        async def cancel(journal: Journal, key: CallKey, why: str):
            if key.call_id == call_id:
                gate.arrived.set()
                await gate.opened.wait()
            return await real(journal, key, why)

        monkeypatch.setattr(Journal, "cancel", cancel)

    async def open(self) -> None:
        """Let the held cancel run at the event loop's next step (it must be waiting)."""
        await asyncio.wait_for(self.arrived.wait(), BOUND_S)
        self.opened.set()


async def _cancel_while_held(tools, call_id: str, marker: str, gate: CancelGate):
    """Start the call and its CancelExecution; return (request, cancel answer, call answer), each bounded."""
    req = tools.request(
        "exec_command", {"cmd": f"echo ran > ran.txt; exec -a {marker} sleep 30"}, call_id=call_id, timeout=60
    )
    call = tools.stub.ExecuteTool(req)
    try:
        cancelled = await asyncio.wait_for(
            tools.stub.CancelExecution(
                pb.CancelExecutionRequest(run_id="run_1", call_id=call_id, reason="the run was cancelled")
            ),
            BOUND_S,
        )
        answered = await asyncio.wait_for(call, BOUND_S)
    finally:
        call.cancel()
    return req, cancelled, answered


async def test_a_cancel_before_the_flights_first_step_ends_the_call_unrun(tools, monkeypatch):
    """Window B: the call never runs, both RPCs answer, the record is final (NOT_EXECUTED)."""
    marker, call_id = _marker(), "c_window_b"
    gate = CancelGate(monkeypatch, call_id)
    real_start = ToolStore.start

    async def start(store: ToolStore, key: CallKey, *args, **kwargs) -> bool:
        won = await real_start(store, key, *args, **kwargs)
        if key.call_id == call_id:
            # The executor creates the flight's task right after this returns, in this step;
            # the cancel scheduled now runs before that task's first step.
            await gate.open()
        return won

    monkeypatch.setattr(ToolStore, "start", start)
    req, cancelled, answered = await _cancel_while_held(tools, call_id, marker, gate)

    assert cancelled.state == pb.EXECUTION_STATE_FINISHED
    assert cancelled.result.status == NOT_EXECUTED, cancelled.result.content
    assert json.loads(cancelled.result.details_json)["reason"] == "CANCELLED"
    assert "the run was cancelled" in cancelled.result.content
    assert answered.result.status == NOT_EXECUTED and not answered.replayed
    # nothing ran, nothing is left, and the record is final: a repeat answers from it
    assert not (tools.workspace / "ran.txt").exists()
    assert not pids_with(marker)
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id=call_id))
    assert got.state == pb.EXECUTION_STATE_FINISHED and got.result.status == NOT_EXECUTED
    again = await asyncio.wait_for(tools.stub.ExecuteTool(req), BOUND_S)
    assert again.replayed and again.result.status == NOT_EXECUTED
    assert not (tools.workspace / "ran.txt").exists()


async def test_a_cancel_inside_the_commands_start_kills_it_at_once(tools, monkeypatch):
    """Window A: the cancel answers INTERRUPTED, the command and its guard are gone, the record final."""
    marker, call_id = _marker(), "c_window_a"
    gate = CancelGate(monkeypatch, call_id)
    real_exec = asyncio.create_subprocess_exec
    bash = shutil.which("bash") or "/bin/bash"

    async def create_subprocess_exec(program, *args, **kwargs):
        if any(marker in arg for arg in args):
            # The stand-in's death does not take the real launcher (and so the guard) with it.
            return await real_exec(bash, "-c", '"$@" & wait', STAND_IN, program, *args, **kwargs)
        return await real_exec(program, *args, **kwargs)

    real_connect = unix_events._UnixSubprocessTransport._connect_pipes

    async def connect_pipes(transport, waiter):
        if list(transport._proc.args[:4]) == [bash, "-c", '"$@" & wait', STAND_IN]:
            # Forked, pipes not yet connected: create_subprocess_exec is waiting for this.
            await until(lambda: _named(marker), "the sandboxed command to run", BOUND_S)
            await gate.open()
        return await real_connect(transport, waiter)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", create_subprocess_exec)
    monkeypatch.setattr(unix_events._UnixSubprocessTransport, "_connect_pipes", connect_pipes)
    req, cancelled, answered = await _cancel_while_held(tools, call_id, marker, gate)

    assert cancelled.state == pb.EXECUTION_STATE_FINISHED
    assert cancelled.result.status == INTERRUPTED, cancelled.result.content
    assert json.loads(cancelled.result.details_json)["reason"] == "CALLER_CANCELLED"
    assert answered.result.status == INTERRUPTED and not answered.replayed
    # the command, its guard and the launchers are gone (the marker is in all their argvs)
    await until(lambda: not pids_with(marker), "the command and its guard to be gone", BOUND_S)
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id=call_id))
    assert got.state == pb.EXECUTION_STATE_FINISHED and got.result.status == INTERRUPTED
    again = await asyncio.wait_for(tools.stub.ExecuteTool(req), BOUND_S)
    assert again.replayed and again.result.status == INTERRUPTED


async def test_a_shutdown_while_the_started_record_is_written_never_runs_the_call(
    start_server, tmp_path, monkeypatch
):
    """The shutdown's cancel reaches a call before its task exists: it never runs, no record stays."""
    marker, call_id = _marker(), "c_window_stop"
    server = build_server(make_config(tmp_path))
    address = await start_server(server)
    inserted, stopping = asyncio.Event(), asyncio.Event()
    real_start, real_cancel = ToolStore.start, getattr(Flight, "cancel", None)

    def cancel(flight: Flight, why: str) -> None:
        stopping.set()
        if real_cancel is not None:
            real_cancel(flight, why)

    async def start(store: ToolStore, key: CallKey, *args, **kwargs) -> bool:
        won = await real_start(store, key, *args, **kwargs)
        if key.call_id == call_id:
            inserted.set()
            # Held until the shutdown (after its grace) has cancelled the call.
            await asyncio.wait_for(stopping.wait(), BOUND_S)
        return won

    monkeypatch.setattr(Flight, "cancel", cancel, raising=False)
    monkeypatch.setattr(ToolStore, "start", start)
    async with grpc.aio.insecure_channel(address) as channel:
        tools = ToolsEnv(
            pb_grpc.ToolServiceStub(channel), channel, make_config(tmp_path), tmp_path, tmp_path / "ws"
        )
        req = tools.request(
            "exec_command", {"cmd": f"echo ran > ran.txt; exec -a {marker} sleep 30"}, call_id=call_id
        )
        call = tools.stub.ExecuteTool(req)
        await asyncio.wait_for(inserted.wait(), BOUND_S)
        await asyncio.wait_for(server.stop(grace=0), BOUND_S)  # the tool service's grace: 5 s
        call.cancel()
    monkeypatch.undo()

    again = build_server(make_config(tmp_path))  # the same state directory and journal
    async with grpc.aio.insecure_channel(await start_server(again)) as channel:
        got = await pb_grpc.ToolServiceStub(channel).GetExecution(
            pb.GetExecutionRequest(run_id="run_1", call_id=call_id)
        )
    assert got.state == pb.EXECUTION_STATE_ABSENT  # a repeat runs it afresh
    assert not (tmp_path / "ws" / "ran.txt").exists()
    assert not pids_with(marker)
