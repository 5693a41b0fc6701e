"""Helpers of the ResumeRun race tests on two runs replicas sharing one PostgreSQL run store.

Used by test_runs_resume_races.py and test_runs_resume_answers_across_replicas.py: a mesh with
two runs replicas, a run suspended on approvals, the races' calls with small random delays,
and the checks of a round (each model request once, the command at most once, no session entry
twice, event streams without a repeated or silently missing seq).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, Mesh, agent, start_mesh, start_replica

ROUNDS = 30
DONE = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)
#: The reasons a losing ResumeRun / CancelRun may give (FAILED_PRECONDITION).
LOSER_REASONS = {"RUN_NOT_SUSPENDED", "RUN_FINISHED"}


def gated_agent() -> pb.AgentSpec:
    return agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)])


async def two_replicas(start_server, tmp_path, emulator) -> tuple[Mesh, pb_grpc.RunServiceStub]:
    mesh = await start_mesh(
        start_server, tmp_path, emulator, pg=True, replica_id="replica-a", lease_seconds=0.6
    )
    _replica_b, stub_b = await start_replica(mesh, start_server, "replica-b")
    return mesh, stub_b


async def after(delay: float, call: Callable[[], Awaitable[Any]]) -> Any:
    await asyncio.sleep(delay)
    return await call()


async def live_events(stub: pb_grpc.RunServiceStub, run_id: str) -> list[pb.RunEvent]:
    """The run's stream on one replica, from the start to run_completed."""
    out: list[pb.RunEvent] = []

    async def read() -> None:
        call = stub.StreamRunEvents(pb.StreamRunEventsRequest(run_id=run_id))
        async for msg in call:
            out.append(msg.event)
            if msg.event.WhichOneof("payload") == "run_completed":
                call.cancel()
                return

    await asyncio.wait_for(read(), WAIT_S)
    return out


def model_requests(mesh: Mesh, since: int) -> list[str]:
    return [
        json.dumps(body, sort_keys=True) for path, body in mesh.emu.requests[since:] if "/responses" in path
    ]


async def suspended_run(mesh: Mesh, workspace: str, calls: int = 1) -> tuple[pb.StartRunResponse, pb.Run]:
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", json.dumps({"cmd": f"echo {n} >> l{n}.txt"}))
                    for n in range(calls)
                ]
            ),
            Reply(text="finished"),
        ]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=gated_agent(), input="go", workspace=workspace)
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    assert run.status == cpb.RUN_STATUS_SUSPENDED, run
    assert len(run.pending_calls) == calls
    return started, run


def check_answer(outcome: object) -> str:
    """'ok' for a response, else the reason of a FAILED_PRECONDITION (anything else fails)."""
    if not isinstance(outcome, BaseException):
        return "ok"
    assert isinstance(outcome, grpc.aio.AioRpcError), repr(outcome)
    assert outcome.code() == grpc.StatusCode.FAILED_PRECONDITION, (outcome.code(), outcome.details())
    reason = reason_of(outcome)
    assert reason in LOSER_REASONS, (reason, outcome.details())
    return reason


def check_events(events: list[pb.RunEvent], where: str) -> None:
    """Seqs 1..n, each once, in order; a range skipped only where a gap event names it.

    A gap carries the seq of the last event before it (004 §2.11), so it is not a repeat: a
    takeover (a replica whose lease lapsed under load) leaves its unused reservation as one.
    """
    expect = 1
    for e in events:
        if e.WhichOneof("payload") == "gap":
            gap = e.gap
            assert gap.last_good == expect - 1 == e.seq, (where, "a gap not after the last event", e)
            assert gap.next == expect + gap.dropped, (where, "a gap that does not name its range", e)
            expect = gap.next
            continue
        assert e.seq == expect, (where, "a seq repeated, missing or out of order", [x.seq for x in events])
        expect += 1
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.count("run_completed") == 1, (where, kinds)
    assert kinds.count("run_resumed") <= 1, (where, kinds)


async def check_round(
    mesh: Mesh,
    started: pb.StartRunResponse,
    workspace: str,
    since: int,
    live: list[list[pb.RunEvent]],
    calls: int = 1,
) -> pb.Run:
    final = await mesh.wait_status(started.run_id, *DONE)
    asked = model_requests(mesh, since)
    assert len(asked) == len(set(asked)), "a model request made twice"
    for n in range(calls):
        path = os.path.join(workspace, f"l{n}.txt")
        ran = open(path).read() if os.path.exists(path) else ""
        assert ran in ("", f"{n}\n"), f"the approved command ran more than once: {ran!r}"
        if final.status == cpb.RUN_STATUS_COMPLETED:
            assert ran == f"{n}\n", "completed without running the approved command"
    entries = await mesh.entries(started.session_id)
    assert len({e.entry_id for e in entries}) == len(entries)
    items = [e.item for e in entries if e.kind == "item"]
    calls_made = [i.tool_call.call_id for i in items if i.HasField("tool_call")]
    results = [i.tool_result.call_id for i in items if i.HasField("tool_result")]
    assert len(calls_made) == len(set(calls_made)), "a tool call entry twice"
    assert len(results) == len(set(results)), "a tool result entry twice"
    answers = [i for i in items if i.HasField("message") and i.message.role == cpb.ROLE_ASSISTANT]
    assert len(answers) <= 1, "the final answer twice"
    if final.status == cpb.RUN_STATUS_COMPLETED:
        assert len(asked) == 2, len(asked)
        assert final.final_output == "finished"
        assert sorted(results) == sorted(calls_made) and len(results) == calls
    for n, events in enumerate(live):
        check_events(events, f"live stream {n}")
    check_events(await mesh.events(started.run_id), "read back")
    return final


async def race_round(
    mesh: Mesh,
    stubs: list[pb_grpc.RunServiceStub],
    rng: random.Random,
    i: int,
    make: Callable[[pb.StartRunResponse, pb.Run], list[Callable[[], Awaitable[Any]]]],
) -> tuple[list[object], pb.Run]:
    workspace = os.path.join(mesh.work, f"round-{i}")
    since = len(mesh.emu.requests)
    started, run = await suspended_run(mesh, workspace)
    readers = [asyncio.create_task(live_events(stub, started.run_id)) for stub in stubs]
    calls = make(started, run)
    outcomes = await asyncio.gather(
        *(after(rng.uniform(0, 0.01), call) for call in calls), return_exceptions=True
    )
    live = await asyncio.gather(*readers)
    final = await check_round(mesh, started, workspace, since, live)
    return outcomes, final


def approve(stub: pb_grpc.RunServiceStub, run_id: str, call_id: str) -> Callable[[], Awaitable[Any]]:
    request = pb.ResumeRunRequest(
        run_id=run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
    )
    return lambda: stub.ResumeRun(request)
