"""Waking the parent when a task's notification lands (004 §2.13; tasks/delivery/wake.py).

An idle parent gets a follow-up run (as the agent that spawned the task); a parent whose
run is still talking gets the wake queued on that run, which reads the notification before
it ends. The emulator answers by what each request holds, and holds a reply back (a
threading.Event) to put the parent's run where a test needs it: never a sleep.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agentrt.tasks.delivery.wake import LABEL_WAKE, WAKE_TEXT
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as rpb
from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S
from tests.service.tasks.harness import TaskMesh, until
from tests.service.tasks.test_tasks_tools import register, start, tool_outputs


async def session_runs(tm: TaskMesh, session_id: str) -> list[rpb.Run]:
    """The session's runs, oldest first."""
    runs = (await tm.mesh.runs.ListRuns(rpb.ListRunsRequest(session_id=session_id))).runs
    return list(reversed(runs))


def user_texts(entries: list[Any]) -> list[str]:
    """The text of every user message of a session, in order."""
    out = []
    for e in entries:
        m = e.item.message
        if e.item.HasField("message") and m.role == cpb.ROLE_USER:
            out.append("".join(b.text.text for b in m.content))
    return out


async def test_an_idle_parent_is_woken_by_a_follow_up_run(tm):
    await register(tm)
    parent_done = threading.Event()

    def respond(path: str, body: Any) -> Reply | None:
        text = json.dumps(body)
        if "CHILD-WORK" in text and "PARENT" not in text:
            parent_done.wait(WAIT_S)  # the task ends only once its parent is idle
            return Reply(text="the answer is 42")
        if "[task wake]" in text:
            assert "[task notification]" in text and "the answer is 42" in text
            return Reply(text="PARENT read the result")
        if not tool_outputs(body):
            return Reply(tool_calls=[ToolCallReply("spawn_task", '{"input": "CHILD-WORK", "label": "w"}')])
        return Reply(text="PARENT waiting")

    tm.mesh.emu.responder = respond
    started = await start(tm, "PARENT go")
    first = await tm.wait_run(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert first.final_output == "PARENT waiting"
    parent_done.set()
    runs = await until(
        lambda: session_runs(tm, started.session_id),
        lambda rs: len(rs) == 2 and rs[1].status == cpb.RUN_STATUS_COMPLETED,
        "the wake run to complete",
    )
    wake = runs[1]
    task = (await tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=started.session_id))).tasks[0]
    assert wake.labels[LABEL_WAKE] == task.task_id and wake.agent_name == "lead"
    assert wake.final_output == "PARENT read the result"
    texts = user_texts(await tm.mesh.entries(started.session_id))
    # the notification, then the wake that points at it: once each
    assert [t.split("\n")[0] for t in texts] == ["PARENT go", "[task notification]", WAKE_TEXT]
    assert (await tm.get(task.task_id)).notified_seq > 0
    # nothing is woken twice: the wake is no longer owed
    assert await tm.server.waker.pass_once() == 0
    assert len(await session_runs(tm, started.session_id)) == 2


async def test_a_talking_parent_reads_the_notification_before_its_run_ends(tm):
    await register(tm)
    notified = threading.Event()

    def respond(path: str, body: Any) -> Reply | None:
        text = json.dumps(body)
        if "CHILD-WORK" in text and "PARENT" not in text:
            return Reply(text="the answer is 42")
        if "[task wake]" in text:
            return Reply(text="PARENT saw it in the same run")
        if not tool_outputs(body):
            return Reply(tool_calls=[ToolCallReply("spawn_task", '{"input": "CHILD-WORK"}')])
        notified.wait(WAIT_S)  # the parent is mid-turn when the notification lands
        return Reply(text="PARENT first answer")

    tm.mesh.emu.responder = respond
    started = await start(tm, "PARENT go")
    task = await until(
        lambda: tm.tasks.ListTasks(pb.ListTasksRequest(parent_session_id=started.session_id)),
        lambda r: len(r.tasks) == 1,
        "the spawn",
    )
    await tm.wait_notified(task.tasks[0].task_id)
    # the wake is queued on the run that is talking: let the run go on
    await until(lambda: tm.run(started.run_id), lambda r: len(r.pending_input) == 1, "the queued wake")
    notified.set()
    run = await tm.wait_run(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "PARENT saw it in the same run"
    assert len(await session_runs(tm, started.session_id)) == 1  # no second run was needed
