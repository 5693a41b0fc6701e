"""Guardrail verdicts survive kill -9 of the runs process (004 §2.6; issue 11), on PostgreSQL.

An agent with a model guardrail on its tool inputs and its output runs one side-effecting
command (it appends a line to a file). The runs process is killed with SIGKILL after the
tool_input verdict was given, once while the command runs and once during an approval
pause, then started again (the approval given after the restart). Then: the judge was asked
once for the tool input (the restarted process read the verdict from the run log), once for
the output; the command ran once; the agent's model was asked exactly twice; the session has
no duplicate and no call without its result; every verdict reached the follower once. On
both providers. Then a racing input tripwire: the process kills itself right after recording
it (crash point `after_guardrail_tripped`); the restarted one fails the run on the recorded
verdict, asking neither the judge nor the model again.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import grpc
import pytest
from chaos_helpers import (
    ChaosMesh,
    Follower,
    check_session,
    session_entries,
)
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.guards import IN, OUT, TOOL_IN, is_judge, judge, verdict

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

MODELS = {"openai": "gpt-test", "anthropic": "claude-test"}


def _cell(text: str) -> str:
    return next((c for c in text.split("cell:")[1:2]), "").split("\\")[0].split('"')[0].split(" ")[0]


#: Racing cells: the agent's own (slow) model request reached the emulator.
_IN_FLIGHT: dict[str, threading.Event] = {}


def responder(path: str, body):
    """Per cell (named in the input): the judge allows; the agent runs one command, then answers.

    A "racing" cell's judge trips, once the agent's streamed (slow) model call is in flight.
    """
    text = json.dumps(body)
    cell = _cell(text)
    if not cell:  # the judge reads the command (it names the cell) or the final output
        return None
    if "racing" in cell:
        arrived = _IN_FLIGHT.setdefault(cell, threading.Event())
        if not is_judge(path, body):
            arrived.set()
            return Reply(text="x" * 2000, chunk_chars=4, event_delay=0.02)
        arrived.wait(STATE_TIMEOUT)
        return verdict("trip", f"not for {cell}")
    if is_judge(path, body):
        return verdict("allow", f"fine for {cell}")
    if "function_call_output" in text or "tool_result" in text:
        return Reply(text=f"finished cell:{cell} now")
    cmd = f"echo start-{cell} >> starts.txt; sleep 1.5; echo line-{cell} >> lines.txt; echo ok # cell:{cell}"
    return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    return reset_chaos(shared_chaos, responder)  # the session's chaos mesh (conftest.py), reset


async def _rpc(address: str, method: str, request):
    async with grpc.aio.insecure_channel(address) as channel:
        return await getattr(pb_grpc.RunServiceStub(channel), method)(request)


async def _until(predicate, what: str) -> None:
    async def poll() -> None:
        while not await predicate():
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), STATE_TIMEOUT)
    except TimeoutError as exc:
        raise AssertionError(f"timed out waiting for {what}") from exc


def _of_cell(chaos: ChaosMesh, cell: str, *, judges: bool) -> list[tuple[str, object]]:
    return [
        (p, b)
        for p, b in chaos.emu.requests
        if p.endswith(("/responses", "/messages"))
        and f"cell:{cell}" in json.dumps(b)
        and is_judge(p, b) == judges
    ]


@pytest.mark.parametrize("point", ["tool_running", "approval"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_guardrail_verdict_survives_kill_9(
    chaos: ChaosMesh, tmp_path: Path, provider: str, point: str
):
    cell = f"guard{provider}{point.replace('_', '')}"
    a = chaos.replicas["a"]
    spec = pb.AgentSpec(
        model=cpb.ModelRef(provider=provider, model=MODELS[provider]),
        tools=[pb.AgentTool(name="exec_command", needs_approval=True if point == "approval" else None)],
        guardrails=[judge("judge", [TOOL_IN, OUT])],
        limits=pb.AgentLimits(max_turns=4),
    )
    workspace = tmp_path / "ws"
    started = await _rpc(
        a.address,
        "StartRun",
        pb.StartRunRequest(agent=spec, input=f"do cell:{cell}", workspace=str(workspace)),
    )
    follower = Follower(started.run_id)
    if point == "approval":
        await follower.follow(a.address, until="run_suspended")
    else:
        await follower.follow(a.address, until="tool_called")
        await _until(lambda: asyncio.sleep(0, (workspace / "starts.txt").exists()), "the command to run")
    assert len(_of_cell(chaos, cell, judges=True)) == 1  # the tool_input verdict, given before the kill
    chaos.kill(a)
    survivor = chaos.restart(a)
    chaos.replicas["a"] = survivor
    if point == "approval":
        run = (await _rpc(survivor.address, "GetRun", pb.GetRunRequest(run_id=started.run_id))).run
        assert run.status == cpb.RUN_STATUS_SUSPENDED, run.failure
        decision = pb.ApprovalDecision(call_id=run.pending_calls[0].call.call_id, approved=True)
        await _rpc(
            survivor.address, "ResumeRun", pb.ResumeRunRequest(run_id=started.run_id, decisions=[decision])
        )
    await follower.to_the_end([survivor.address])

    run = (await _rpc(survivor.address, "GetRun", pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == f"finished cell:{cell} now"
    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"  # the command ran once
    assert len(_of_cell(chaos, cell, judges=False)) == 2  # no model request repeated
    judged = _of_cell(chaos, cell, judges=True)
    assert len(judged) == 2  # the tool input once (read back from the log), the output once
    assert run.nested_usage.requests == 2 and run.nested_usage.input_tokens == 14
    stages = [
        e.guardrail_result.stage for e in follower.order if e.WhichOneof("payload") == "guardrail_result"
    ]
    assert stages == [TOOL_IN, OUT]
    check_session(await session_entries(chaos.sessions, started.session_id))


async def test_a_racing_tripwire_recorded_before_a_kill_fails_the_run_without_asking_again(
    chaos: ChaosMesh, tmp_path: Path
):
    """The replica dies right after it recorded the tripwire (crash point), before the run's failure."""
    cell = "guardracing"
    a = chaos.replicas["a"]
    chaos.kill(a)
    a = chaos.restart(a, {"AGENTRT_RUNS_CRASH_POINTS": "after_guardrail_tripped"})
    spec = pb.AgentSpec(
        model=cpb.ModelRef(provider="anthropic", model=MODELS["anthropic"]), guardrails=[judge("judge", [IN])]
    )
    started = await _rpc(a.address, "StartRun", pb.StartRunRequest(agent=spec, input=f"do cell:{cell}"))
    assert a.proc is not None and a.proc.wait(STATE_TIMEOUT) == -9  # it killed itself at the point
    survivor = chaos.restart(a)
    chaos.replicas["a"] = survivor
    follower = Follower(started.run_id)
    await follower.to_the_end([survivor.address])

    run = (await _rpc(survivor.address, "GetRun", pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "guardrail_tripped", run.failure
    assert f"not for {cell}" in run.failure.message
    assert len(_of_cell(chaos, cell, judges=True)) == 1  # the verdict came from the log
    assert len(_of_cell(chaos, cell, judges=False)) == 1  # the raced call, cancelled; never asked again
    assert run.usage.requests == 1 and run.nested_usage.requests == 1  # the judge's only
    kinds = [e.WhichOneof("payload") for e in follower.order]
    assert kinds.count("guardrail_result") == 1 and "model_responded" not in kinds
