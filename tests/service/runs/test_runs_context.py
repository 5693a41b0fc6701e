"""The run loop keeps its session's context in memory; the session stays the source of truth."""

from __future__ import annotations

import json

from agentrt.sessions import codec
from agentrt.sessions.store import SessionStore
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


async def test_an_entry_appended_between_turns_is_in_the_next_render(mesh, monkeypatch):
    # A second writer appends right after turn 1's batch commits, before turn 2 renders:
    # the store's append is wrapped so the write lands at exactly that moment (the same
    # real store writes it; nothing is faked).
    original = SessionStore.append

    async def append(self, tenant, ref, entries, expected_last_seq=None):
        stored = await original(self, tenant, ref, entries, expected_last_seq)
        if _batch_of(entries) == "turn:1":
            await original(self, tenant, ref, codec.entries_in([_note()]), None)
        return stored

    monkeypatch.setattr(SessionStore, "append", append)
    ws = mesh.work
    call = ToolCallReply("read_file", '{"path": "missing.txt"}')
    mesh.emu.script([Reply(tool_calls=[call]), Reply(tool_calls=[call]), Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=ws))
    events = await mesh.events(started.run_id)
    assert events[-2].run_completed.status == cpb.RUN_STATUS_COMPLETED

    bodies = [json.dumps(body) for path, body in mesh.emu.requests if path.endswith("/responses")]
    assert len(bodies) == 3
    assert NOTE not in bodies[0]
    assert NOTE in bodies[1] and NOTE in bodies[2]
    # It renders where the log has it: after turn 1's tool output, before turn 2's call.
    turn2 = json.loads(bodies[2])["input"]
    texts = [json.dumps(item) for item in turn2]
    at = next(i for i, t in enumerate(texts) if NOTE in t)
    outputs = [i for i, t in enumerate(texts) if "function_call_output" in t]
    assert outputs[0] < at < outputs[1]

    entries = await mesh.entries(started.session_id)
    assert sum(1 for e in entries if NOTE in e.SerializeToString().decode("utf-8", "replace")) == 1
