"""A child run's approval survives kill -9 of the runs process (issue 11 acceptance; 004 §2.8, §2.2 step 6).

A parent agent calls a child agent as a tool; the child's side-effecting command (it appends
a line to a file) needs approval, so the child and the parent suspend. The runs process is
killed with SIGKILL between the pause and the approval (real processes on PostgreSQL), started
again, and the approval is given through the parent. Then: the command ran exactly once, both
runs completed, the parent's usage includes the child's, and the emulator received each model
request exactly once. On both providers. Then the same without an approval, the runs process
killed while the child's command runs: the restarted process takes both runs over, the parent
waits for the same child (never a second one) and the command's line is written once. And
a kill between the child's resume and the parent's (a crash point): the lease loop of the
next process resumes the parent from the rows alone.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest
from chaos_helpers import ChaosMesh, check_session, session_entries
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

BOSS, HELPER = "You are the boss of cell", "You are the helper of cell"
MODELS = {"openai": "gpt-test", "anthropic": "claude-test"}


def _answered(text: str) -> bool:
    return "function_call_output" in text or "tool_result" in text


def responder(path: str, body):
    """Per cell (named in the input): the parent asks the child; the child runs one command."""
    text = json.dumps(body)
    cell = next((c for c in text.split("cell:")[1:2]), "").split("\\")[0].split('"')[0].split(" ")[0]
    if not cell:
        return None
    if HELPER in text:
        if _answered(text):
            return Reply(text=f"child finished {cell}", input_tokens=41, output_tokens=4)
        cmd = f"echo line-{cell} >> lines.txt; echo ok-{cell}"
        if "slow" in cell:  # killed while it runs
            cmd = f"echo start-{cell} >> starts.txt; sleep 1.5; {cmd}"
        return Reply(
            tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))],
            input_tokens=40,
            output_tokens=3,
        )
    if _answered(text):
        return Reply(text=f"parent finished {cell}", input_tokens=101, output_tokens=9)
    ask = ToolCallReply("ask_helper", json.dumps({"input": f"append for cell:{cell}"}))
    return Reply(tool_calls=[ask], input_tokens=100, output_tokens=8)


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    return reset_chaos(shared_chaos, responder)  # the session's chaos mesh (conftest.py), reset


async def _rpc(address: str, method: str, request):
    async with grpc.aio.insecure_channel(address) as channel:
        return await getattr(pb_grpc.RunServiceStub(channel), method)(request)


async def _run(address: str, run_id: str) -> pb.Run:
    return (await _rpc(address, "GetRun", pb.GetRunRequest(run_id=run_id))).run


async def _until_status(address: str, run_id: str, *statuses: int) -> pb.Run:
    async def poll() -> pb.Run:
        while True:
            run = await _run(address, run_id)
            if run.status in statuses:
                return run
            await asyncio.sleep(0.05)

    try:
        return await asyncio.wait_for(poll(), STATE_TIMEOUT)
    except TimeoutError as exc:
        raise AssertionError(f"run {run_id} never reached {statuses}") from exc


def _model(provider: str) -> cpb.ModelRef:
    return cpb.ModelRef(provider=provider, model=MODELS[provider])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_child_approval_survives_kill_9_and_runs_the_inner_tool_once(
    chaos: ChaosMesh, tmp_path: Path, provider: str
):
    cell = f"child{provider}"
    a = chaos.replicas["a"]
    helper = pb.AgentSpec(
        name=f"helper-{provider}",
        instructions=f"{HELPER} {cell}.",
        model=_model(provider),
        tools=[pb.AgentTool(name="exec_command", needs_approval=True)],
    )
    boss = pb.AgentSpec(
        name=f"boss-{provider}",
        instructions=f"{BOSS} {cell}.",
        model=_model(provider),
        tools=[pb.AgentTool(name="ask_helper", agent_name=helper.name)],
    )
    for spec in (helper, boss):
        await _rpc(a.address, "RegisterAgent", pb.RegisterAgentRequest(agent=spec))
    workspace = tmp_path / "ws"
    started = await _rpc(
        a.address,
        "StartRun",
        pb.StartRunRequest(agent_name=boss.name, input=f"do cell:{cell}", workspace=str(workspace)),
    )
    parent = await _until_status(a.address, started.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_FAILED)
    assert parent.status == cpb.RUN_STATUS_SUSPENDED, parent.failure
    child_id = parent.child_run_ids[0]
    await _until_status(a.address, child_id, cpb.RUN_STATUS_SUSPENDED)

    chaos.kill(a)  # kill -9 between the pause and the approval
    survivor = chaos.restart(a)
    chaos.replicas["a"] = survivor

    parent = await _run(survivor.address, started.run_id)
    assert parent.status == cpb.RUN_STATUS_SUSPENDED
    (shown,) = parent.pending_calls
    assert (shown.run_id, shown.call.name, shown.kind) == (
        child_id,
        "exec_command",
        pb.PENDING_CALL_KIND_APPROVAL,
    )
    assert not (workspace / "lines.txt").exists()
    await _rpc(
        survivor.address,
        "ResumeRun",
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=shown.call.call_id, approved=True)]
        ),
    )
    parent = await _until_status(
        survivor.address, started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED
    )
    assert parent.status == cpb.RUN_STATUS_COMPLETED, parent.failure
    assert parent.final_output == f"parent finished {cell}"
    child = await _run(survivor.address, child_id)
    assert child.status == cpb.RUN_STATUS_COMPLETED and child.final_output == f"child finished {cell}"
    assert child.parent_run_id == started.run_id

    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"  # the inner tool ran exactly once
    asked = [json.dumps(b, sort_keys=True) for _, b in chaos.emu.requests if f"cell:{cell}" in json.dumps(b)]
    assert len(asked) == 4 and len(set(asked)) == 4, f"model requests of {cell}: {len(asked)}"
    assert (child.usage.input_tokens, child.usage.output_tokens, child.usage.requests) == (81, 7, 2)
    assert (parent.usage.input_tokens, parent.usage.output_tokens) == (201 + 81, 17 + 7)
    assert parent.usage.requests == 4 and parent.nested_usage.input_tokens == 81

    for session_id in (started.session_id, child.session_id):
        check_session(await session_entries(chaos.sessions, session_id))
    child_results = [
        e.item.tool_result
        for e in await session_entries(chaos.sessions, child.session_id)
        if e.item.HasField("tool_result")
    ]
    assert [(r.name, r.content) for r in child_results] == [("exec_command", f"ok-{cell}\n")]
    results = [
        e.item.tool_result
        for e in await session_entries(chaos.sessions, started.session_id)
        if e.item.HasField("tool_result")
    ]
    assert [(r.name, r.content, r.child_run_id) for r in results] == [
        ("ask_helper", f"child finished {cell}", child_id)
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_kill_while_the_child_runs_its_command_takes_both_runs_over(
    chaos: ChaosMesh, tmp_path: Path, provider: str
):
    cell = f"slow{provider}"
    a = chaos.replicas["a"]
    helper = pb.AgentSpec(
        name=f"slowhelper-{provider}",
        instructions=f"{HELPER} {cell}.",
        model=_model(provider),
        tools=[pb.AgentTool(name="exec_command")],
    )
    boss = pb.AgentSpec(
        name=f"slowboss-{provider}",
        instructions=f"{BOSS} {cell}.",
        model=_model(provider),
        tools=[pb.AgentTool(name="ask_helper", agent_name=helper.name)],
    )
    for spec in (helper, boss):
        await _rpc(a.address, "RegisterAgent", pb.RegisterAgentRequest(agent=spec))
    workspace = tmp_path / "ws"
    started = await _rpc(
        a.address,
        "StartRun",
        pb.StartRunRequest(agent_name=boss.name, input=f"do cell:{cell}", workspace=str(workspace)),
    )

    async def command_started() -> None:
        while not (workspace / "starts.txt").exists():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(command_started(), STATE_TIMEOUT)
    chaos.kill(a)  # kill -9 while the child's command runs in the tool service
    survivor = chaos.restart(a)
    chaos.replicas["a"] = survivor

    parent = await _until_status(
        survivor.address, started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED
    )
    assert parent.status == cpb.RUN_STATUS_COMPLETED, parent.failure
    assert parent.final_output == f"parent finished {cell}" and len(parent.child_run_ids) == 1
    child = await _run(survivor.address, parent.child_run_ids[0])
    assert child.status == cpb.RUN_STATUS_COMPLETED and child.final_output == f"child finished {cell}"
    assert (workspace / "starts.txt").read_text() == f"start-{cell}\n"
    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
    asked = [json.dumps(b, sort_keys=True) for _, b in chaos.emu.requests if f"cell:{cell}" in json.dumps(b)]
    assert len(asked) == 4 and len(set(asked)) == 4, f"model requests of {cell}: {len(asked)}"
    assert parent.usage.requests == 4 and parent.nested_usage.requests == 2
    for session_id in (started.session_id, child.session_id):
        check_session(await session_entries(chaos.sessions, session_id))


async def test_a_crash_between_the_childs_resume_and_the_parents_is_repaired_by_the_lease_loop(
    chaos: ChaosMesh, tmp_path: Path
):
    # ResumeRun through the parent resumes the child, and the process dies (SIGKILL, a crash
    # point) before the parent's view of the child is refreshed: the parent is left SUSPENDED
    # showing a call nobody waits on any more. The next process takes the child over, and its
    # lease loop resumes the parent from the rows alone; nobody calls ResumeRun again.
    provider, cell = "openai", "repairopenai"
    a = chaos.replicas["a"]
    helper = pb.AgentSpec(
        name="repairhelper",
        instructions=f"{HELPER} {cell}.",
        model=_model(provider),
        tools=[pb.AgentTool(name="exec_command", needs_approval=True)],
    )
    boss = pb.AgentSpec(
        name="repairboss",
        instructions=f"{BOSS} {cell}.",
        model=_model(provider),
        tools=[pb.AgentTool(name="ask_helper", agent_name=helper.name)],
    )
    for spec in (helper, boss):
        await _rpc(a.address, "RegisterAgent", pb.RegisterAgentRequest(agent=spec))
    workspace = tmp_path / "ws"
    started = await _rpc(
        a.address,
        "StartRun",
        pb.StartRunRequest(agent_name=boss.name, input=f"do cell:{cell}", workspace=str(workspace)),
    )
    parent = await _until_status(a.address, started.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_FAILED)
    assert parent.status == cpb.RUN_STATUS_SUSPENDED, parent.failure
    child_id = parent.child_run_ids[0]
    await _until_status(a.address, child_id, cpb.RUN_STATUS_SUSPENDED)

    chaos.kill(a)
    crashing = chaos.restart(a, {"AGENTRT_RUNS_CRASH_POINTS": "after_child_resumed"})
    call_id = parent.pending_calls[0].call.call_id
    with pytest.raises(grpc.aio.AioRpcError):  # the process dies inside the call
        await _rpc(
            crashing.address,
            "ResumeRun",
            pb.ResumeRunRequest(
                run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
            ),
        )
    assert crashing.proc is not None and crashing.proc.wait(STATE_TIMEOUT) == -9
    survivor = chaos.restart(crashing)
    chaos.replicas["a"] = survivor

    parent = await _until_status(
        survivor.address, started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED
    )
    assert parent.status == cpb.RUN_STATUS_COMPLETED, parent.failure
    assert parent.final_output == f"parent finished {cell}"
    child = await _run(survivor.address, child_id)
    assert child.status == cpb.RUN_STATUS_COMPLETED
    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
    asked = [json.dumps(b, sort_keys=True) for _, b in chaos.emu.requests if f"cell:{cell}" in json.dumps(b)]
    assert len(asked) == 4 and len(set(asked)) == 4, f"model requests of {cell}: {len(asked)}"
    for session_id in (started.session_id, child.session_id):
        check_session(await session_entries(chaos.sessions, session_id))
