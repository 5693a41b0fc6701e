"""A run sandbox whose release was missed must not leak when the runs process is killed (breaker3).

A sandboxed run suspends on an approval (its sandbox exists), the tool service goes down,
the run is canceled (its end is stored, the release fails and is remembered in memory), the
runs process is killed with SIGKILL, the tool service and the runs process come back: the
new process's sweep (runs/lifecycle/sandboxes.py) finds the ended run's unmarked sandbox in the run row
and releases it. Before the sweep nothing ever did (a docker container would stay forever).
Real processes on PostgreSQL.

Then random kill -9 of a parent fanning out to three children: every command runs once and
every run completes (this found the tool service stranding a call whose caller went away while
its STARTED record was written). And a child agent with a sandbox of its own, the runs
process killed while the child's command runs in it: the next process takes both runs over,
the command's line is written once, the child adopts the same sandbox and releases it at
its end.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import pytest
from chaos_helpers import ChaosMesh
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def responder(path: str, body):
    text = json.dumps(body)
    if "kidcell" in text:
        answered = "function_call_output" in text
        if "You are the sandboxed helper" in text:
            if answered:
                return Reply(text="child finished", input_tokens=3, output_tokens=1)
            cmd = "echo start >> starts.txt; sleep 1.5; echo line >> lines.txt"
            return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])
        if answered:
            return Reply(text="parent finished", input_tokens=3, output_tokens=1)
        ask = ToolCallReply("ask_helper", json.dumps({"input": "append for kidcell"}))
        return Reply(tool_calls=[ask], input_tokens=3, output_tokens=1)
    if "fancell" in text:
        answered = "function_call_output" in text
        if "You are a fan helper" in text:
            if answered:
                return Reply(text="child finished", input_tokens=3, output_tokens=1)
            part = text.split("fan part ")[1][:1]
            cmd = f"echo start-{part} >> starts.txt; sleep 0.8; echo line-{part} >> lines.txt"
            return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])
        if answered:
            return Reply(text="parent finished", input_tokens=3, output_tokens=1)
        asks = [ToolCallReply("ask_helper", json.dumps({"input": f"fan part {i} fancell"})) for i in range(3)]
        return Reply(tool_calls=asks, input_tokens=3, output_tokens=1)
    if "leakcell" not in text:
        return None
    answered = text.count('"function_call_output"')
    if answered >= 2:
        return Reply(text="done", input_tokens=5, output_tokens=1)
    # turn 1 runs a call (creating the sandbox); turn 2's call needs approval
    call = (
        ToolCallReply("exec_command", json.dumps({"cmd": "echo hi"}))
        if answered
        else ToolCallReply("list_files", "{}")
    )
    return Reply(tool_calls=[call], input_tokens=5, output_tokens=1)


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    # The session's chaos mesh (conftest.py), reset: each test has cells of its own (leakcell,
    # kidcell, fancell in its own workspace).
    return reset_chaos(shared_chaos, responder)


async def _runs(address: str, method: str, request):
    async with grpc.aio.insecure_channel(address) as channel:
        return await getattr(pb_grpc.RunServiceStub(channel), method)(request)


async def _sandbox(address: str, sandbox_id: str) -> tpb.Sandbox:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = tpb_grpc.ToolServiceStub(channel)
        return (await stub.GetSandbox(tpb.GetSandboxRequest(sandbox_id=sandbox_id))).sandbox


async def _until(address: str, run_id: str, *statuses: int) -> pb.Run:
    deadline = time.monotonic() + STATE_TIMEOUT
    while time.monotonic() < deadline:
        run = (await _runs(address, "GetRun", pb.GetRunRequest(run_id=run_id))).run
        if run.status in statuses:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {statuses}")


async def test_a_missed_release_survives_kill_9_of_the_runs_process(chaos: ChaosMesh):
    a = chaos.replicas["a"]
    spec = pb.AgentSpec(
        name="leaker",
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="list_files"), pb.AgentTool(name="exec_command", needs_approval=True)],
    )
    started = await _runs(
        a.address,
        "StartRun",
        pb.StartRunRequest(
            agent=spec, input="go leakcell", sandbox=pb.RunSandbox(backend=tpb.SANDBOX_BACKEND_LOCAL)
        ),
    )
    run = await _until(a.address, started.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_SUSPENDED, run.failure
    tools_address = chaos.tools
    sandbox_id = run.sandbox_id
    assert sandbox_id
    assert (await _sandbox(tools_address, sandbox_id)).state == tpb.SANDBOX_STATE_RUNNING

    chaos.kill(chaos.home("tools"))
    await _runs(a.address, "CancelRun", pb.CancelRunRequest(run_id=started.run_id, reason="leak"))
    assert (
        await _until(a.address, started.run_id, cpb.RUN_STATUS_CANCELED)
    ).status == cpb.RUN_STATUS_CANCELED
    await asyncio.sleep(1.0)  # the release was tried and missed (the tool service is down)
    chaos.kill(a)
    chaos.spawn("tools", "tools", int(tools_address.rsplit(":", 1)[1]))
    chaos.replicas["a"] = chaos.restart(a)
    # a few lease-loop passes of the new process
    deadline = time.monotonic() + 20
    state = tpb.SANDBOX_STATE_RUNNING
    while time.monotonic() < deadline:
        state = (await _sandbox(tools_address, sandbox_id)).state
        if state == tpb.SANDBOX_STATE_ABSENT:
            break
        await asyncio.sleep(0.2)
    assert state == tpb.SANDBOX_STATE_ABSENT, tpb.SandboxState.Name(state)


async def test_a_kill_while_a_sandboxed_child_runs_its_command_adopts_and_releases_its_sandbox(
    chaos: ChaosMesh, tmp_path: Path
):
    a = chaos.replicas["a"]
    model = cpb.ModelRef(provider="openai", model="gpt-test")
    helper = pb.AgentSpec(
        name="boxhelper",
        instructions="You are the sandboxed helper.",
        model=model,
        tools=[pb.AgentTool(name="exec_command")],
        sandbox=pb.RunSandbox(backend=tpb.SANDBOX_BACKEND_LOCAL, env={"WHO": "child"}),
    )
    boss = pb.AgentSpec(
        name="boxboss", model=model, tools=[pb.AgentTool(name="ask_helper", agent_name="boxhelper")]
    )
    for spec in (helper, boss):
        await _runs(a.address, "RegisterAgent", pb.RegisterAgentRequest(agent=spec))
    workspace = tmp_path / "ws"
    started = await _runs(
        a.address,
        "StartRun",
        pb.StartRunRequest(agent_name="boxboss", input="do kidcell", workspace=str(workspace)),
    )
    deadline = time.monotonic() + STATE_TIMEOUT
    while not (workspace / "starts.txt").exists():
        assert time.monotonic() < deadline, "the child's command never started"
        await asyncio.sleep(0.02)
    chaos.kill(a)  # kill -9 while the child's command runs in its sandbox
    survivor = chaos.restart(a)
    chaos.replicas["a"] = survivor
    parent = await _until(survivor.address, started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert parent.status == cpb.RUN_STATUS_COMPLETED, parent.failure
    assert len(parent.child_run_ids) == 1
    child = (await _runs(survivor.address, "GetRun", pb.GetRunRequest(run_id=parent.child_run_ids[0]))).run
    assert child.status == cpb.RUN_STATUS_COMPLETED and child.sandbox_id, child
    assert (workspace / "starts.txt").read_text() == "start\n"
    assert (workspace / "lines.txt").read_text() == "line\n"
    asked = [b for _, b in chaos.emu.requests if "kidcell" in json.dumps(b)]
    assert len(asked) == 4, len(asked)
    deadline = time.monotonic() + STATE_TIMEOUT
    while (await _sandbox(chaos.tools, child.sandbox_id)).state != tpb.SANDBOX_STATE_ABSENT:
        assert time.monotonic() < deadline, "the child's sandbox was never released"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_kill_9_at_random_moments_of_a_fan_out_runs_every_command_once(
    chaos: ChaosMesh, tmp_path: Path, seed
):
    import random

    rng = random.Random(seed)
    a = chaos.replicas["a"]
    model = cpb.ModelRef(provider="openai", model="gpt-test")
    helper = pb.AgentSpec(
        name="fanhelper",
        instructions="You are a fan helper.",
        model=model,
        tools=[pb.AgentTool(name="exec_command")],
    )
    boss = pb.AgentSpec(
        name="fanboss", model=model, tools=[pb.AgentTool(name="ask_helper", agent_name="fanhelper")]
    )
    for spec in (helper, boss):
        await _runs(a.address, "RegisterAgent", pb.RegisterAgentRequest(agent=spec))
    workspace = tmp_path / "ws"
    started = await _runs(
        a.address,
        "StartRun",
        pb.StartRunRequest(agent_name="fanboss", input="do fancell", workspace=str(workspace)),
    )
    for _ in range(3):
        await asyncio.sleep(rng.uniform(0.05, 1.2))
        chaos.kill(chaos.replicas["a"])
        chaos.replicas["a"] = chaos.restart(chaos.replicas["a"])
    address = chaos.replicas["a"].address
    parent = await _until(
        address, started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_SUSPENDED
    )
    assert parent.status == cpb.RUN_STATUS_COMPLETED, (
        parent.status,
        parent.failure,
        list(parent.pending_calls),
    )
    assert len(parent.child_run_ids) == 3, list(parent.child_run_ids)
    for child_id in parent.child_run_ids:
        child = (await _runs(address, "GetRun", pb.GetRunRequest(run_id=child_id))).run
        assert child.status == cpb.RUN_STATUS_COMPLETED, child.failure
    starts = sorted((workspace / "starts.txt").read_text().split())
    lines = sorted((workspace / "lines.txt").read_text().split())
    assert starts == ["start-0", "start-1", "start-2"], starts
    assert lines == ["line-0", "line-1", "line-2"], lines
