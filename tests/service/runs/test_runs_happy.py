"""A run end to end over the real mesh: tool call, answer, events, session, status."""

from __future__ import annotations

import json
import os

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent


def payloads(events: list[pb.RunEvent]) -> list[str]:
    return [e.WhichOneof("payload") for e in events]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_run_calls_exec_command_then_answers(mesh, provider):
    mesh.emu.script(
        [
            Reply(
                text="I will write the file.",
                tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi > out.txt"}')],
            ),
            Reply(text="done: out.txt holds hi"),
        ]
    )
    workspace = os.path.join(mesh.work, provider)
    request = pb.StartRunRequest(agent=agent(provider), input="write hi to out.txt", workspace=workspace)
    started = await mesh.runs.StartRun(request)
    events = await mesh.events(started.run_id)

    kinds = payloads(events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert kinds[0] == "run_started" and kinds[-1] == "stream_end" and kinds[-2] == "run_completed"
    for needed in (
        "turn_started",
        "model_delta",
        "model_responded",
        "tool_called",
        "tool_returned",
        "items_persisted",
    ):
        assert needed in kinds
    done = events[-2].run_completed
    assert done.status == cpb.RUN_STATUS_COMPLETED and done.phase == cpb.RUN_PHASE_COMPLETED
    assert done.final_output == "done: out.txt holds hi"
    assert done.turns == 2 and done.usage.requests == 2
    returned = [e.tool_returned.result for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert returned[0].status == cpb.TOOL_RESULT_STATUS_OK and not returned[0].is_error

    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == done.final_output
    assert run.workspace == workspace
    with open(os.path.join(workspace, "out.txt")) as f:
        assert f.read().strip() == "hi"

    entries = await mesh.entries(started.session_id)
    items = [e.item for e in entries]
    assert items[0].message.role == cpb.ROLE_USER
    assert items[0].message.content[0].text.text == "write hi to out.txt"
    assert items[1].message.role == cpb.ROLE_ASSISTANT
    call = items[2].tool_call
    assert call.name == "exec_command" and call.arguments == '{"cmd": "echo hi > out.txt"}'
    assert call.call_id.startswith("call_") and call.provider_call_id
    assert items[3].tool_result.call_id == call.call_id
    assert items[4].message.role == cpb.ROLE_ASSISTANT
    assert items[4].message.content[0].text.text == "done: out.txt holds hi"
    assert json.loads(entries[4].display.extra_json)["decision"] == "final"
    # usage rides on exactly one entry per response: the last one the model produced
    assert [bool(e.HasField("usage")) for e in entries] == [False, False, True, False, True]

    # the second model request replayed the first turn with the runtime's call id
    second = mesh.emu.requests[-1][1]
    assert call.call_id in json.dumps(second)


async def test_exec_command_output_arrives_as_tool_progressed_before_the_result(mesh):
    """A running command's output is passed on as tool_progressed events (004 §2.7g)."""
    cmd = "echo first-line; echo second-line >&2; echo third-line"
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))]),
            Reply(text="done"),
        ]
    )
    workspace = os.path.join(mesh.work, "progress")
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent("openai"), input="print three lines", workspace=workspace)
    )
    events = await mesh.events(started.run_id)
    kinds = payloads(events)
    call_id = next(e.tool_called.call.call_id for e in events if e.WhichOneof("payload") == "tool_called")
    progressed = [e.tool_progressed for e in events if e.WhichOneof("payload") == "tool_progressed"]
    assert progressed and all(p.call_id == call_id for p in progressed)
    by_stream: dict[str, str] = {}
    for p in progressed:
        by_stream[p.stream] = by_stream.get(p.stream, "") + p.text
    assert by_stream["stdout"] == "first-line\nthird-line\n"
    assert by_stream["stderr"] == "second-line\n"
    first_progress = kinds.index("tool_progressed")
    assert kinds.index("tool_called") < first_progress < kinds.index("tool_returned")
    # The events are part of the replayable log: a second reader sees the same ones.
    again = await mesh.events(started.run_id)
    assert [e.tool_progressed for e in again if e.WhichOneof("payload") == "tool_progressed"] == progressed


async def test_read_only_calls_stream_no_progress(mesh):
    """read_file runs through the unary path: no tool_progressed events."""
    workspace = os.path.join(mesh.work, "readonly")
    os.makedirs(workspace, exist_ok=True)
    with open(os.path.join(workspace, "a.txt"), "w") as f:
        f.write("alpha\n")
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("read_file", '{"path": "a.txt"}')]), Reply(text="read it")]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent("openai"), input="read a.txt", workspace=workspace)
    )
    events = await mesh.events(started.run_id)
    kinds = payloads(events)
    assert "tool_returned" in kinds and "tool_progressed" not in kinds
