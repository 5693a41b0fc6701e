"""Concurrent writers of one session (issue 10), on SQLite and PostgreSQL.

- Concurrent StartRuns on one session: exactly one is accepted, the others are refused
  SESSION_BUSY (the busy check and the insert are one step: a partial unique index).
- A foreign append during a turn: the turn's batch lands where its request was built, on
  its own branch, never after the foreign entry (docs/decisions/0003).
"""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent


async def test_concurrent_start_runs_on_one_session_accept_exactly_one(store_mesh):
    mesh = store_mesh
    session = (await mesh.sessions.CreateSession(spb.CreateSessionRequest())).session
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 2"}')])] * 4)
    mesh.emu.script([Reply(text="done")] * 4)

    async def start() -> str:
        try:
            await mesh.runs.StartRun(
                pb.StartRunRequest(agent=agent(), input="go", session_id=session.session_id)
            )
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
            return reason_of(err)
        return "accepted"

    outcomes = await asyncio.gather(*(start() for _ in range(4)))
    assert sorted(outcomes) == ["SESSION_BUSY"] * 3 + ["accepted"], outcomes
    runs = (await mesh.runs.ListRuns(pb.ListRunsRequest(session_id=session.session_id))).runs
    assert len(runs) == 1


async def test_a_foreign_append_during_a_turn_never_lands_before_the_turn(store_mesh):
    """The turn's batch is written under the leaf its request was built from; the foreign
    entry stays on a sibling branch and a diagnostic names it."""
    mesh = store_mesh
    workspace = os.path.join(mesh.work, "foreign")
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "sleep 1; echo ran"}))]),
            Reply(text="done"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=workspace))
    ref = spb.SessionRef(session_id=started.session_id)

    async def tool_called() -> None:
        async for msg in mesh.runs.StreamRunEvents(pb.StreamRunEventsRequest(run_id=started.run_id)):
            if msg.event.WhichOneof("payload") == "tool_called":
                return

    await asyncio.wait_for(tool_called(), WAIT_S)
    foreign = spb.Entry(
        kind="item",
        item=spb.Item(
            message=cpb.Message(
                role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text="meanwhile"))]
            ),
            source=spb.ITEM_SOURCE_USER,
        ),
    )
    stored = (
        await mesh.sessions.AppendEntries(spb.AppendEntriesRequest(session=ref, entries=[foreign]))
    ).entries
    foreign_id = stored[0].entry_id
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "done"

    log = await mesh.entries(started.session_id)
    by_id = {e.entry_id: e for e in log}
    # the first turn's request held the input only; its batch hangs under the input
    first_call = next(e for e in log if e.item.HasField("tool_call"))
    parent = by_id[first_call.parent_id]
    while parent.kind != "item" or not parent.item.HasField("message"):
        parent = by_id[parent.parent_id]
    assert parent.item.message.content[0].text.text == "go"
    # the foreign entry is not an ancestor of anything the run wrote afterwards
    view = (await mesh.sessions.GetContext(spb.GetContextRequest(session=ref))).entries
    assert foreign_id not in {e.entry_id for e in view}
    assert foreign_id in by_id  # never deleted: it stays on its own branch
    assert any(d.code == "session_branched" and foreign_id in d.details_json for d in run.diagnostics)
    # no model request answered a message it never contained
    second = json.dumps(mesh.emu.requests[1][1])
    assert "meanwhile" not in second


@pytest.mark.parametrize("kind", ["update"])
async def test_a_foreign_display_update_is_stepped_over(store_mesh, kind):
    """An entry that changes nothing the model reads (a display update) does not fork the session."""
    mesh = store_mesh
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "sleep 1; echo ran"}))]),
            Reply(text="done"),
        ]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace=os.path.join(mesh.work, "update"))
    )
    ref = spb.SessionRef(session_id=started.session_id)

    async def tool_called() -> None:
        async for msg in mesh.runs.StreamRunEvents(pb.StreamRunEventsRequest(run_id=started.run_id)):
            if msg.event.WhichOneof("payload") == "tool_called":
                return

    await asyncio.wait_for(tool_called(), WAIT_S)
    first = (await mesh.entries(started.session_id))[0]
    update = spb.Entry(kind=kind, target_entry_id=first.entry_id, display=spb.Display(title="renamed"))
    await mesh.sessions.AppendEntries(spb.AppendEntriesRequest(session=ref, entries=[update]))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert not any(d.code == "session_branched" for d in run.diagnostics)
    log = await mesh.entries(started.session_id)
    assert not any(e.kind == "leaf" for e in log)
