"""CancelExecution in storms: many cancels of one call, of many calls, of unknown keys, and a shutdown.

On the real service over grpc.aio with the bwrap sandbox (decision 0053 covers the windows
of a single cancel; test_tools_cancel_windows.py). Here:

- A second cancel of a call whose first cancel is still being journaled. Before the fix each
  cancel cancelled the flight's task again, and the second cut the first's journal write
  short: the flight ended before its record was FINISHED, so both CancelExecution answered
  STARTED ("it runs in another replica"), in a service that had killed it itself.
  `test_a_second_cancel_while_the_first_is_journaled_answers_finished` holds the write so the
  second cancel lands there every time; the storms found it (seeded, so the same every run).
- Cancels of keys nothing ran under leave NOT_EXECUTED tombstones; malformed keys are
  refused with INVALID_ARGUMENT and the reason, and record nothing.
- A shutdown in the middle of a storm leaves no sandboxed process and no STARTED record.
"""

from __future__ import annotations

import asyncio
import os
import random

import grpc
import pytest
from tools_helpers import ToolsEnv, make_config, pids_with, until

from agentrt.tools.execution.flight import Flight
from agentrt.tools.server import build_server
from agentrt.tools.storage.store import CallKey, ToolStore
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc
from tests.conftest import rpc_error_reason

INTERRUPTED = common_pb2.TOOL_RESULT_STATUS_INTERRUPTED
NOT_EXECUTED = common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED
FINISHED = pb.EXECUTION_STATE_FINISHED
#: The bound on every wait for an answer, seconds (each command alone would take 30).
BOUND_S = 20.0
#: When a storm's cancels are sent after their call, seconds (0: in the same step).
DELAYS = (0, 0, 0.001, 0.005, 0.02, 0.1, 0.3)


def _cancel(call_id: str, reason: str = "storm") -> pb.CancelExecutionRequest:
    return pb.CancelExecutionRequest(run_id="run_1", call_id=call_id, reason=reason)


def _sleeper(tools: ToolsEnv, key: str, marker: str) -> pb.ExecuteToolRequest:
    cmd = f"echo {key} >> ran.txt; exec -a {marker} sleep 30"
    return tools.request("exec_command", {"cmd": cmd}, call_id=key, timeout=60)


def _ran(tools: ToolsEnv) -> list[str]:
    path = tools.workspace / "ran.txt"
    return path.read_text().split() if path.exists() else []


def _answer(got: pb.CancelExecutionResponse) -> tuple[str, int]:
    return pb.ExecutionState.Name(got.state), got.result.status


async def test_a_second_cancel_while_the_first_is_journaled_answers_finished(tools, monkeypatch):
    """Both cancels answer FINISHED, INTERRUPTED: the second does not cut the first's ending short."""
    marker, key = f"agentrt-second-{os.urandom(4).hex()}", "c_second"
    held, release = asyncio.Event(), asyncio.Event()
    asked: list[str] = []
    real_finish, real_cancel = ToolStore.finish, Flight.cancel

    async def finish(store: ToolStore, k: CallKey, owner: str, outcome) -> bool:
        if k.call_id == key:  # the first cancel's INTERRUPTED, held until the second cancel came
            held.set()
            await release.wait()
        return await real_finish(store, k, owner, outcome)

    def cancel(flight: Flight, why: str) -> None:
        asked.append(why)
        real_cancel(flight, why)
        if len(asked) == 2:
            release.set()

    monkeypatch.setattr(ToolStore, "finish", finish)
    monkeypatch.setattr(Flight, "cancel", cancel)
    call = tools.stub.ExecuteTool(_sleeper(tools, key, marker))
    await until(lambda: pids_with(marker), "the command to run")
    first = asyncio.ensure_future(tools.stub.CancelExecution(_cancel(key, "first")))
    await asyncio.wait_for(held.wait(), BOUND_S)
    second = asyncio.ensure_future(tools.stub.CancelExecution(_cancel(key, "second")))
    got = await asyncio.wait_for(asyncio.gather(first, second), BOUND_S)
    answered = await asyncio.wait_for(call, BOUND_S)

    assert [_answer(g) for g in got] == [("EXECUTION_STATE_FINISHED", INTERRUPTED)] * 2
    assert answered.result.status == INTERRUPTED
    assert all("first" in g.result.content for g in got)  # the first reason is the record's
    await until(lambda: not pids_with(marker), "the command to be gone")


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_storm_of_cancels_on_the_same_and_different_keys(tools, seed: int):
    """Ten calls, one to four cancels each at seeded moments: every answer is the call's ending."""
    rng = random.Random(seed)
    marker = f"agentrt-storm-{os.urandom(4).hex()}"
    keys = [f"c_storm_{seed}_{i}" for i in range(10)]

    async def later(key: str, delay: float) -> pb.CancelExecutionResponse:
        await asyncio.sleep(delay)
        return await tools.stub.CancelExecution(_cancel(key))

    calls = {key: asyncio.ensure_future(tools.stub.ExecuteTool(_sleeper(tools, key, marker))) for key in keys}
    cancels = [
        (key, asyncio.ensure_future(later(key, rng.choice(DELAYS))))
        for key in keys
        for _ in range(rng.randint(1, 4))
    ]
    answers = await asyncio.wait_for(asyncio.gather(*calls.values(), return_exceptions=True), BOUND_S)
    cancelled = await asyncio.wait_for(
        asyncio.gather(*(t for _, t in cancels), return_exceptions=True), BOUND_S
    )

    endings = {("EXECUTION_STATE_FINISHED", INTERRUPTED), ("EXECUTION_STATE_FINISHED", NOT_EXECUTED)}
    bad: list[tuple[str, object]] = []
    for (key, _), got in zip(cancels, cancelled, strict=True):
        if isinstance(got, BaseException) or _answer(got) not in endings:
            bad.append((key, got))
    for key, got in zip(calls, answers, strict=True):
        if isinstance(got, BaseException) or got.result.status not in (INTERRUPTED, NOT_EXECUTED):
            bad.append((key, got))
    assert not bad, bad
    await until(lambda: not pids_with(marker), "every sandboxed command to be gone")
    ran = _ran(tools)
    assert len(ran) == len(set(ran))  # none ran twice
    for key in keys:  # every record final; a repeat answers from it and runs nothing
        got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id=key))
        assert got.state == FINISHED, (key, got)
        again = await tools.stub.ExecuteTool(_sleeper(tools, key, marker))
        assert again.replayed and again.result.status == got.result.status, (key, again.result)
    assert _ran(tools) == ran
    alive = await tools.sh("echo alive")  # the service still serves
    assert alive.status == common_pb2.TOOL_RESULT_STATUS_OK and alive.content.strip() == "alive"


async def test_cancels_of_unknown_keys_leave_tombstones_and_malformed_keys_are_refused(tools):
    for reason in ("once", "twice"):
        got = await tools.stub.CancelExecution(_cancel("c_unknown", reason))
        assert _answer(got) == ("EXECUTION_STATE_FINISHED", NOT_EXECUTED)
        assert "once" in got.result.content  # the tombstone's reason, kept
    resp = await tools.stub.ExecuteTool(
        tools.request("exec_command", {"cmd": "echo ran > ran.txt"}, call_id="c_unknown")
    )
    assert resp.result.status == NOT_EXECUTED and not (tools.workspace / "ran.txt").exists()
    for req, reason in [
        (pb.CancelExecutionRequest(run_id="", call_id="c_bad"), "MISSING_FIELD"),
        (pb.CancelExecutionRequest(run_id="run_1", call_id=""), "MISSING_FIELD"),
        (pb.CancelExecutionRequest(run_id="run_1", call_id="c" * 5000), "INVALID_ID"),
        (pb.CancelExecutionRequest(run_id="run 1", call_id="c_bad"), "INVALID_ID"),
        (pb.CancelExecutionRequest(run_id="run_1", call_id="c_bad", attempt=-1), "INVALID_VALUE"),
        (pb.CancelExecutionRequest(run_id="run_1", call_id="c_bad", attempt=10**6), "INVALID_VALUE"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await tools.stub.CancelExecution(req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rpc_error_reason(err.value) == reason, (req.call_id[:20], err.value.details())
    # An oversized reason is cut to 256 characters, not refused.
    long = await tools.stub.CancelExecution(_cancel("c_long", "r" * 100_000))
    assert (
        _answer(long) == ("EXECUTION_STATE_FINISHED", NOT_EXECUTED) and "r" * 257 not in long.result.content
    )
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_bad"))
    assert got.state == pb.EXECUTION_STATE_ABSENT  # the refused cancels recorded nothing


@pytest.mark.parametrize("seed", [1, 2])
async def test_a_shutdown_during_a_cancel_storm_leaves_no_process_and_no_started_record(
    start_server, tmp_path, seed: int
):
    rng = random.Random(seed)
    marker = f"agentrt-stop-{os.urandom(4).hex()}"
    server = build_server(make_config(tmp_path))
    address = await start_server(server)
    keys = [f"c_stop_{i}" for i in range(10)]
    async with grpc.aio.insecure_channel(address) as channel:
        tools = ToolsEnv(
            pb_grpc.ToolServiceStub(channel), channel, make_config(tmp_path), tmp_path, tmp_path / "ws"
        )
        pending = []
        for key in keys:
            pending.append(asyncio.ensure_future(tools.stub.ExecuteTool(_sleeper(tools, key, marker))))
            if rng.random() < 0.6:
                pending.append(asyncio.ensure_future(tools.stub.CancelExecution(_cancel(key))))
            await asyncio.sleep(rng.choice([0, 0.001, 0.01]))
        await asyncio.sleep(rng.choice([0.0, 0.05, 0.2]))
        await asyncio.wait_for(server.stop(grace=0), BOUND_S)
        await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), BOUND_S)
    await until(lambda: not pids_with(marker), "every sandboxed command to be gone")
    again = build_server(make_config(tmp_path))  # the same state directory and journal
    async with grpc.aio.insecure_channel(await start_server(again)) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        states = {
            key: pb.ExecutionState.Name(
                (await stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id=key))).state
            )
            for key in keys
        }
    assert "EXECUTION_STATE_STARTED" not in states.values(), states
