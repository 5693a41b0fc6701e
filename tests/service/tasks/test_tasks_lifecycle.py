"""A task's life through the real RunService: spawn, run, end, notify; pause and resume; chains."""

from __future__ import annotations

import asyncio
import time

from agentrt.core.tasknote import parse_notification
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent
from tests.service.tasks.harness import crash


async def test_spawn_runs_in_a_hidden_session_and_notifies_the_parent(tm):
    tm.mesh.emu.script([Reply(text="the answer is 42")])
    parent = await tm.parent()
    task = await tm.spawn(parent, label="find the answer", kind="research", state="s0")
    assert task.status == pb.TASK_STATUS_WORKING and task.attempt == 1 and task.max_attempts == 3
    assert task.run_id and task.session_id and task.session_id != parent and task.depth == 1
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "the answer is 42" and done.summary == "the answer is 42"
    assert done.kind == "research" and done.state == "s0" and done.label == "find the answer"
    # the run ran in the hidden session that serves the parent
    hidden = (
        await tm.mesh.sessions.GetSession(
            spb.GetSessionRequest(session=spb.SessionRef(session_id=task.session_id))
        )
    ).session
    assert hidden.hidden and hidden.parent_session_id == parent
    run = await tm.run(task.run_id)
    assert run.session_id == task.session_id and run.status == cpb.RUN_STATUS_COMPLETED
    # the ending reaches the parent as one machine-readable notification
    notified = await tm.wait_notified(task.task_id)
    assert notified.pending_delivery_id == ""
    notes = await tm.notifications(parent)
    assert len(notes) == 1 and notes[0].seq == notified.notified_seq
    assert notes[0].item.message.role == cpb.ROLE_USER
    [line] = parse_notification(notes[0].item.message.content[0].text.text)
    assert (line.task_id, line.status, line.attempt, line.label) == (
        task.task_id,
        "completed",
        1,
        "find the answer",
    )
    assert line.summary == "the answer is 42"
    # listed under its parent, without the full result
    listed = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=parent))).tasks
    assert [t.task_id for t in listed] == [task.task_id] and listed[0].result == ""


async def test_approval_pause_is_input_required_and_resume_completes(tm):
    tm.mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "true"}')]),
            Reply(text="approved and done"),
        ]
    )
    spec = agent(tools=[rpb.AgentTool(name="exec_command", needs_approval=True)])
    parent = await tm.parent()
    task = await tm.spawn(parent, agent=spec)
    paused = await tm.wait_task(task.task_id, pb.TASK_STATUS_INPUT_REQUIRED)
    assert paused.run_id == task.run_id
    # input_required is not terminal: nothing is owed, nothing notified
    assert paused.pending_delivery_id == "" and await tm.notifications(parent) == []
    run = await tm.wait_run(task.run_id, cpb.RUN_STATUS_SUSPENDED)
    call_id = run.pending_calls[0].call.call_id
    await tm.mesh.runs.ResumeRun(
        rpb.ResumeRunRequest(
            run_id=task.run_id, decisions=[rpb.ApprovalDecision(call_id=call_id, approved=True)]
        )
    )
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "approved and done"


async def test_steps_chain_runs_under_one_task(tm):
    tm.mesh.emu.script([Reply(text="one"), Reply(text="two"), Reply(text="three")])
    parent = await tm.parent()
    task = await tm.spawn(parent, input="step one", steps=["step two", "step three"])
    assert task.steps == 2 and task.step == 0
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    assert done.result == "three" and done.step == 2 and done.continuations == 2 and done.attempt == 1
    runs = (await tm.mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=task.session_id))).runs
    assert len(runs) == 3 and done.run_id == runs[0].run_id  # the newest run is the task's current one
    entries = await tm.mesh.entries(task.session_id)
    inputs = [e.item.message.content[0].text.text for e in entries if e.item.message.role == cpb.ROLE_USER]
    assert inputs == ["step one", "step two", "step three"]
    # one notification for the task, for its last run
    await tm.wait_notified(task.task_id)
    assert len(await tm.notifications(parent)) == 1


async def test_a_chain_survives_lease_passes_between_its_runs(tm):
    """Every lease pass (here every ~70 ms) lands somewhere in a continuation; none may take the
    chaining follower for one that lost its task (the row's launch moved: it moved it itself)."""
    crash(tm.server)  # one replica only: nobody else adopts or sweeps
    busy, _ = await tm.replica(lease_seconds=0.2)
    steps = [f"step {i}" for i in range(2, 9)]
    tm.mesh.emu.script([Reply(text=f"done {i}") for i in range(1, 9)])
    task = await tm.spawn(await tm.parent(), stub=busy, steps=steps)
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED, pb.TASK_STATUS_FAILED)
    assert done.status == pb.TASK_STATUS_COMPLETED, done.result
    assert (done.result, done.continuations) == ("done 8", 7)


async def test_a_stalled_lease_pass_spares_the_launch_its_own_replica_is_starting(tm):
    """The test above's failure under CPU load, made certain: the replica is starting its
    chain's next run (StartRun on its way) when one of its own lease passes stalls past the
    lease between its renewal and its sweep. The sweep must not fail that launch as
    interrupted: the replica is alive and is starting it (decision 0052)."""
    crash(tm.server)  # one replica only
    stub, server = await tm.replica(lease_seconds=60.0)  # its own passes are 20 s apart: the test runs one
    attempts, deps = server.attempts, server.deps
    assert attempts is not None and deps is not None
    starting, go = asyncio.Event(), asyncio.Event()
    start_run, renew = deps.peers.start_run, deps.upkeep.renew

    async def held_start(tenant: str, req: rpb.StartRunRequest) -> str:
        if req.input == "step two":
            starting.set()
            await go.wait()
        return await start_run(tenant, req)

    async def renew_then_stall(owner: str, keys: set[tuple[str, str, str]], until_s: float):
        # renewed, then the pass stalls until past that lease: as good as a lease already run out
        return await renew(owner, keys, time.time() - 1.0)

    deps.peers.start_run = held_start  # type: ignore[method-assign]
    tm.mesh.emu.script([Reply(text="one"), Reply(text="two")])
    task = await tm.spawn(await tm.parent(), stub=stub, input="step one", steps=["step two"])
    await asyncio.wait_for(starting.wait(), 30)
    chaining = await tm.get(task.task_id)
    assert (chaining.status, chaining.step, chaining.run_id) == (pb.TASK_STATUS_WORKING, 1, "")
    deps.upkeep.renew = renew_then_stall  # type: ignore[method-assign]
    await attempts.pass_once()
    deps.upkeep.renew = renew  # type: ignore[method-assign]
    assert (await tm.get(task.task_id)).status == pb.TASK_STATUS_WORKING
    go.set()
    done = await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED, pb.TASK_STATUS_FAILED)
    assert (done.status, done.result, done.continuations) == (pb.TASK_STATUS_COMPLETED, "two", 1)
