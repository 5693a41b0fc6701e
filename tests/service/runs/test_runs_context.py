"""The run loop keeps its session's context in memory; the session stays the source of truth."""

from __future__ import annotations

import json

from agentrt.runs.peers.client import Peers
from agentrt.sessions import codec
from agentrt.sessions.servicer import SessionServicer
from agentrt.sessions.storage.store import SessionStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

NOTE = "a note from a second writer"


def _note() -> spb.Entry:
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=NOTE))])
    return spb.Entry(kind="item", item=spb.Item(message=msg, source=spb.ITEM_SOURCE_USER))


def _batch_of(entries: list) -> str:
    extra = entries[0].display.extra_json if entries and entries[0].display else ""
    return json.loads(extra or "{}").get("batch", "")


def _note_after_turn_1(monkeypatch) -> None:
    """A second writer appends NOTE right after turn 1's batch commits, before turn 2 renders.

    The store's append is wrapped so the write lands at exactly that moment (the same real
    store writes it; nothing is faked).
    """
    original = SessionStore.append

    async def append(self, tenant, ref, entries, expected_last_seq=None):
        stored = await original(self, tenant, ref, entries, expected_last_seq)
        if _batch_of(entries) == "turn:1":
            await original(self, tenant, ref, codec.entries_in([_note()]), None)
        return stored

    monkeypatch.setattr(SessionStore, "append", append)


async def test_an_entry_committed_right_after_a_batch_meets_the_next_batchs_guard(mesh, monkeypatch):
    # The batch's append answers the log as of its commit (decision 0057): the note,
    # committed just after, is not in turn 2's request, and turn 2's batch, guarded by the
    # seq its request was built at, goes on its own branch (decision 0010). Nothing is
    # lost: the note stays in the log, on a sibling branch, and a diagnostic names it.
    _note_after_turn_1(monkeypatch)
    calls = _count_list_entries(monkeypatch)
    bodies, started = await _three_turn_run(mesh)
    assert len(bodies) == 3 and not any(NOTE in b for b in bodies)
    # One ListEntries: the refused batch's read of what was appended after its request's
    # seq (persistence.write_batch), not a per-turn tail read.
    assert len(calls) == 1

    entries = await mesh.entries(started.session_id)
    notes = [e for e in entries if NOTE in e.SerializeToString().decode("utf-8", "replace")]
    assert len(notes) == 1
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert any(d.code == "session_branched" and notes[0].entry_id in d.details_json for d in run.diagnostics)
    view = await mesh.sessions.GetContext(
        spb.GetContextRequest(session=spb.SessionRef(session_id=started.session_id))
    )
    assert notes[0].entry_id not in {e.entry_id for e in view.entries}


def _count_list_entries(monkeypatch) -> list[int]:
    """Count the run loop's ListEntries calls (Peers.tail, its one caller), by after_seq."""
    calls: list[int] = []
    original = Peers.tail

    async def tail(self, tenant, session_id, after_seq):
        calls.append(after_seq)
        return await original(self, tenant, session_id, after_seq)

    monkeypatch.setattr(Peers, "tail", tail)
    return calls


async def _three_turn_run(mesh) -> tuple[list[str], pb.StartRunResponse]:
    call = ToolCallReply("read_file", '{"path": "missing.txt"}')
    mesh.emu.script([Reply(tool_calls=[call]), Reply(tool_calls=[call]), Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=mesh.work))
    events = await mesh.events(started.run_id)
    assert events[-2].run_completed.status == cpb.RUN_STATUS_COMPLETED
    return [json.dumps(body) for path, body in mesh.emu.requests if path.endswith("/responses")], started


async def test_the_batch_append_is_the_next_turns_tail_read(mesh, monkeypatch):
    # Each turn's batch is appended with include_tail: the log after it comes back with the
    # append, so the next turn reads nothing more (one RPC fewer per turn, decision 0020).
    calls = _count_list_entries(monkeypatch)
    bodies, started = await _three_turn_run(mesh)
    assert len(bodies) == 3
    assert calls == []


async def test_a_session_service_that_answers_no_tail_is_read_as_before(mesh, monkeypatch):
    # A session service that answers no tail (tail_last_seq 0: an older one) leaves the
    # loop to read the log after its batch itself, beside the save point: the note
    # committed right after turn 1's batch is in that read, so it reaches turn 2's render.
    _note_after_turn_1(monkeypatch)
    original = SessionServicer.AppendEntries

    async def no_tail(self, request, context):
        resp = await original(self, request, context)
        resp.ClearField("tail")
        resp.tail_last_seq = 0
        return resp

    monkeypatch.setattr(SessionServicer, "AppendEntries", no_tail)
    calls = _count_list_entries(monkeypatch)
    bodies, started = await _three_turn_run(mesh)
    assert NOTE not in bodies[0] and NOTE in bodies[1] and NOTE in bodies[2]
    # It renders where the log has it: after turn 1's tool output, before turn 2's call.
    texts = [json.dumps(item) for item in json.loads(bodies[2])["input"]]
    at = next(i for i, t in enumerate(texts) if NOTE in t)
    outputs = [i for i, t in enumerate(texts) if "function_call_output" in t]
    assert outputs[0] < at < outputs[1]
    # One read begun after the input (the new session's view is known empty before it,
    # decision 0058) and after each of the two tool turns' batches; none after the final
    # answer's (no turn follows it).
    assert len(calls) == 3 and calls[0] == 1 and calls[0] < calls[1] < calls[2]


def _count_context_reads(monkeypatch) -> list[str]:
    """Count the run loop's GetContext calls (Peers.context, its one caller), by session."""
    calls: list[str] = []
    original = Peers.context

    async def context(self, tenant, session_id):
        calls.append(session_id)
        return await original(self, tenant, session_id)

    monkeypatch.setattr(Peers, "context", context)
    return calls


def _inputs(body: str) -> list[str]:
    return [json.dumps(item) for item in json.loads(body)["input"]]


async def test_a_run_on_a_new_session_reads_no_context(mesh, monkeypatch):
    # StartRun created the session: its view is empty until the run's input, whose
    # append answers the log as of its commit, so no turn reads the whole view (decision 0058).
    reads = _count_context_reads(monkeypatch)
    tails = _count_list_entries(monkeypatch)
    bodies, started = await _three_turn_run(mesh)
    assert reads == [] and tails == []
    assert '"go"' in _inputs(bodies[0])[0]
    # Each request holds everything the session's view held when it was built.
    view = await mesh.sessions.GetContext(
        spb.GetContextRequest(session=spb.SessionRef(session_id=started.session_id))
    )
    assert len(view.entries) == 6  # the input, two calls and their outputs, the answer
    assert len(_inputs(bodies[2])) == 5


async def test_a_run_on_a_session_with_history_reads_it_once(mesh, monkeypatch):
    reads = _count_context_reads(monkeypatch)
    created = await mesh.sessions.CreateSession(spb.CreateSessionRequest())
    session_id = created.session.session_id
    await mesh.sessions.AppendEntries(
        spb.AppendEntriesRequest(session=spb.SessionRef(session_id=session_id), entries=[_note()])
    )
    mesh.emu.script([Reply(text="done")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace=mesh.work, session_id=session_id)
    )
    events = await mesh.events(started.run_id)
    assert events[-2].run_completed.status == cpb.RUN_STATUS_COMPLETED
    assert reads == [started.session_id]
    body = json.dumps(mesh.emu.requests[-1][1])
    assert -1 < body.find(NOTE) < body.find('"go"')


async def test_an_entry_written_before_the_runs_input_reaches_its_first_request(mesh, monkeypatch):
    # A second writer appends to the new session between StartRun and the run's input:
    # the input's guard (seq 0) fails, the input goes after the note, the copy is dropped
    # and the first turn reads the whole view, note included.
    original = SessionStore.append

    async def append(self, tenant, ref, entries, expected_last_seq=None):
        if _batch_of(entries) == "input" and expected_last_seq == 0:
            await original(self, tenant, ref, codec.entries_in([_note()]), None)
        return await original(self, tenant, ref, entries, expected_last_seq)

    monkeypatch.setattr(SessionStore, "append", append)
    reads = _count_context_reads(monkeypatch)
    bodies, started = await _three_turn_run(mesh)
    assert reads == [started.session_id]
    assert -1 < bodies[0].find(NOTE) < bodies[0].find('"go"')


async def _replaced_at_input(monkeypatch, *, before: bool) -> None:
    """Delete the run's session and create it again under the same id when the input is appended.

    `before`: ahead of the input's append; else right after it commits. The same real store
    does it (nothing is faked).
    """
    from agentrt.sessions.domain import Ref

    original = SessionStore.append

    async def append(self, tenant, ref, entries, expected_last_seq=None):
        replace = _batch_of(entries) == "input"
        if replace and before:
            await self.delete(tenant, Ref(ref.session_id))
            await self.create(tenant, ref.session_id)
        stored = await original(self, tenant, ref, entries, expected_last_seq)
        if replace and not before:
            await self.delete(tenant, Ref(ref.session_id))
            await self.create(tenant, ref.session_id)
        return stored

    monkeypatch.setattr(SessionStore, "append", append)


async def test_a_run_never_writes_into_a_session_created_again_under_its_id(store_mesh, monkeypatch):
    # 004 §2.5e2: a handle to a deleted session neither reads nor writes its replacement. The
    # run holds its session by the generation it started on (decision 0058): deleted and
    # created again under the same id, the replacement gets nothing of the run, which fails.
    for before in (True, False):
        monkeypatch.undo()
        await _replaced_at_input(monkeypatch, before=before)
        call = ToolCallReply("read_file", '{"path": "missing.txt"}')
        store_mesh.emu.script([Reply(tool_calls=[call]), Reply(text="done")])
        started = await store_mesh.runs.StartRun(
            pb.StartRunRequest(agent=agent(), input="go", workspace=store_mesh.work)
        )
        events = await store_mesh.events(started.run_id)
        done = next(e.run_completed for e in events if e.WhichOneof("payload") == "run_completed")
        assert done.status == cpb.RUN_STATUS_FAILED, (before, done)
        assert done.failure.kind == "session_gone", done.failure
        assert done.failure.message == "The run's session was deleted.", done.failure
        assert await store_mesh.entries(started.session_id) == [], before


async def test_a_child_run_is_held_by_its_hidden_sessions_generation(store_mesh, monkeypatch):
    # An agent tool's child run, like every run (decision 0058): its hidden session deleted
    # and created again under its id just before the child's input, the replacement gets
    # nothing of the child, which fails session_gone (a newcomer's reproducer).
    from agentrt.sessions.domain import Ref

    mesh = store_mesh
    helper = agent(name="helper", instructions="You are the helper.", tools=[])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    tool = pb.AgentTool(name="ask_helper", agent_name="helper")
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="boss", tools=[tool])))
    original = SessionStore.append
    inputs: list[str] = []

    async def append(self, tenant, ref, entries, expected_last_seq=None):
        if _batch_of(entries) == "input":
            inputs.append(ref.session_id)
            if len(inputs) == 2:  # the child's input
                await self.delete(tenant, Ref(ref.session_id))
                await self.create(tenant, ref.session_id)
        return await original(self, tenant, ref, entries, expected_last_seq)

    monkeypatch.setattr(SessionStore, "append", append)
    ask = ToolCallReply("ask_helper", json.dumps({"input": "hello"}))
    mesh.emu.script([Reply(tool_calls=[ask]), Reply(text="child says hi"), Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=mesh.work))
    done = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)
    run = await mesh.wait_status(started.run_id, *done)
    assert len(inputs) == 2 and len(run.child_run_ids) == 1, (inputs, run)
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run.child_run_ids[0]))).run
    assert await mesh.entries(child.session_id) == []
    assert child.status == cpb.RUN_STATUS_FAILED and child.failure.kind == "session_gone", child.failure
