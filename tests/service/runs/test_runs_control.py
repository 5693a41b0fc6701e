"""Run control survives crashes; diagnostics and the time budget (issue 9; 004 §2.11b, §2.11d, §2.9).

- Input injected while a turn is in flight is never lost on takeover: what the dead
  replica wrote to the session counts as consumed, nothing else does.
- Pending input is readable on GetRun, and reported (not dropped) when a run ends.
- What a run survived reaches its events, its Run and the turn's last session entry.
- The time budget holds while tools run and while the run is suspended.
"""

from __future__ import annotations

import asyncio
import json
import os

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent, start_mesh, start_replica
from tests.service.runs.test_runs_takeover import until


def _user_texts(entries) -> list[str]:
    return [
        e.item.message.content[0].text.text
        for e in entries
        if e.item.HasField("message") and e.item.message.role == cpb.ROLE_USER
    ]


async def test_input_injected_before_a_lost_save_point_is_delivered_once(start_server, tmp_path, emulator):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    emulator.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "sleep 0.5; echo ok"}))]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo again"}))]),
            Reply(text="done"),
        ]
    )
    died = asyncio.Event()
    manager = mesh.runs_server.manager

    def die_after_the_session_write(point: str) -> None:
        if point == "after_session_write" and not died.is_set():
            died.set()
            manager._loop_task.cancel()  # the replica is gone: no lease renewal, no save
            raise asyncio.CancelledError()

    manager.deps.crash = die_after_the_session_write
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace=os.path.join(mesh.work, "inject"))
    )
    await mesh.events(started.run_id, until="tool_called")
    steer = pb.INJECTION_KIND_STEER
    await mesh.runs.InjectInput(pb.InjectInputRequest(run_id=started.run_id, text="first note", kind=steer))
    await asyncio.wait_for(died.wait(), WAIT_S)
    # arrives after the session holds the turn with "first note", before anything recorded it
    await mesh.runs.InjectInput(pb.InjectInputRequest(run_id=started.run_id, text="second note", kind=steer))
    pending = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run.pending_input
    assert [p.text for p in pending] == ["first note", "second note"]  # readable while queued
    assert all(p.kind == steer and p.id for p in pending)

    replica_b, stub = await start_replica(mesh, start_server)

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert list(run.pending_input) == []
    texts = _user_texts(await mesh.entries(started.session_id))
    assert texts.count("first note") == 1 and texts.count("second note") == 1
    assert run.final_output == "done"  # the second note reached the model at turn 2's save point
    asked = [body for path, body in emulator.requests if path.endswith("/responses")]
    assert len(asked) == 3, [json.dumps(b)[-200:] for b in asked]  # each model request once
    assert "second note" in json.dumps(asked[-1])


async def test_pending_input_is_reported_when_a_run_ends(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi"}')])])
    spec = agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    await mesh.runs.InjectInput(
        pb.InjectInputRequest(run_id=started.run_id, text="too late", kind=pb.INJECTION_KIND_NEXT_TURN)
    )
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert [p.text for p in run.pending_input] == ["too late"]
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id))
    events = await mesh.events(started.run_id)
    done = next(e.run_completed for e in events if e.WhichOneof("payload") == "run_completed")
    assert [p.text for p in done.unconsumed_input] == ["too late"]
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert [p.text for p in run.pending_input] == ["too late"]  # still readable: never dropped


def _inject_before_the_end(mesh, monkeypatch, status: int) -> list[int]:
    """Send InjectInput("late") just before the save that ends a run with `status`; its positions.

    The real RunStore.save runs right after it (nothing is faked): the input is accepted
    after the run read its queue for its end, before that end commits.
    """
    from agentrt.runs.storage.store import RunStore

    original = RunStore.save
    pushed: list[int] = []

    async def save(self, run_id, *args, **kw):
        if (kw.get("changes") or {}).get("status") == status and not pushed:
            kind = pb.INJECTION_KIND_FOLLOW_UP
            answer = await mesh.runs.InjectInput(pb.InjectInputRequest(run_id=run_id, text="late", kind=kind))
            pushed.append(answer.position)
        return await original(self, run_id, *args, **kw)

    monkeypatch.setattr(RunStore, "save", save)
    return pushed


def _completed(events: list) -> pb.RunCompleted:
    return next(e.run_completed for e in events if e.WhichOneof("payload") == "run_completed")


async def test_input_accepted_while_a_run_writes_its_end_is_reported(store_mesh, monkeypatch):
    # An InjectInput accepted after the finishing run read its queue, before its terminal
    # save commits: it is reported in run_completed.unconsumed_input, which the terminal save
    # settles under the run row's lock (decision 0058). It was reported nowhere before.
    mesh = store_mesh
    pushed = _inject_before_the_end(mesh, monkeypatch, cpb.RUN_STATUS_COMPLETED)
    mesh.emu.script([Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=mesh.work))
    done = _completed(await mesh.events(started.run_id))
    assert done.status == cpb.RUN_STATUS_COMPLETED and pushed == [1]
    assert [p.text for p in done.unconsumed_input] == ["late"]
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert [p.text for p in run.pending_input] == ["late"]  # still readable: never dropped
    # A stream opened after the run ended replays it from storage: stored as reported.
    assert [p.text for p in _completed(await mesh.events(started.run_id)).unconsumed_input] == ["late"]


async def test_input_accepted_while_a_suspended_run_is_canceled_is_reported(store_mesh, monkeypatch):
    # CancelRun of a suspended run ends it in the manager, from the run it read: an
    # InjectInput accepted before its guarded save is in unconsumed_input too (a newcomer's
    # reproducer; decision 0058).
    mesh = store_mesh
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi"}')])])
    spec = agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go", workspace=mesh.work))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    pushed = _inject_before_the_end(mesh, monkeypatch, cpb.RUN_STATUS_CANCELED)
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id))
    done = _completed(await mesh.events(started.run_id))
    assert done.status == cpb.RUN_STATUS_CANCELED and pushed == [1]
    assert [p.text for p in done.unconsumed_input] == ["late"]


async def test_a_provider_retry_is_a_diagnostic_on_events_run_and_session(mesh):
    mesh.emu.script([ErrorReply(status=500), Reply(text="answer after a retry")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    retry = [d for d in run.diagnostics if d.code == "model_retry"]
    assert len(retry) == 1 and retry[0].turn == 1 and json.loads(retry[0].details_json)["retries"] == 1
    events = await mesh.events(started.run_id)
    assert [e.diagnostic.code for e in events if e.WhichOneof("payload") == "diagnostic"] == ["model_retry"]
    entries = await mesh.entries(started.session_id)
    extra = json.loads(entries[-1].display.extra_json)
    assert [d["code"] for d in extra["diagnostics"]] == ["model_retry"]


async def test_the_time_budget_holds_while_tools_run(mesh):
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 60"}')]), Reply(text="never")]
    )
    spec = agent(limits=pb.AgentLimits(time_budget={"seconds": 1}))
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=spec, input="go", workspace=os.path.join(mesh.work, "budget"))
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "timeout"
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert len(results) == 1 and results[0].content.startswith("Cancelled while running")


async def test_the_time_budget_holds_while_suspended(start_server, tmp_path, emulator):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.3)
    emulator.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi"}')])])
    spec = agent(
        tools=[pb.AgentTool(name="exec_command", needs_approval=True)],
        limits=pb.AgentLimits(time_budget={"nanos": 500_000_000}),
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "timeout" and run.failure.retryable
    events = await mesh.events(started.run_id)
    assert events[-1].WhichOneof("payload") == "stream_end"
