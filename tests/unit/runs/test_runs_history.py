"""The session entries a turn writes, and how they render back (persistence <-> convert)."""

from __future__ import annotations

import json

from agentrt.core import render
from agentrt.core.decide import DecisionKind, decide, mint_call_id
from agentrt.runs.convert.history import history_of
from agentrt.runs.convert.model import messages_out, response_in
from agentrt.runs.loop.persistence import input_entry, turn_entries
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as spb

RUN = "run_01jd5x7k2m3n4p5q6r7s8t9v0w"


def response(
    text: str = "", calls: list[tuple[str, str]] = (), stop=cpb.STOP_REASON_TOOL_USE
) -> cpb.ModelResponse:
    content = [cpb.ContentBlock(text=cpb.TextBlock(text=text))] if text else []
    for i, (name, args) in enumerate(calls):
        content.append(cpb.ContentBlock(tool_use=cpb.ToolCall(call_id=f"p{i}", name=name, arguments=args)))
    return cpb.ModelResponse(
        response_id="resp1",
        content=content,
        stop_reason=stop,
        usage=cpb.Usage(input_tokens=10, output_tokens=5),
    )


def stored(entries: list[spb.Entry]) -> list[spb.Entry]:
    for seq, e in enumerate(entries, start=1):
        e.seq = seq
    return entries


def test_a_tool_turn_writes_message_calls_results_with_usage_on_the_last_model_entry():
    resp = response("let me look", [("list_files", "{}"), ("read_file", '{"path": "a"}')])
    d = decide(response_in(resp), call_id=lambda i: mint_call_id(RUN, 1, i))
    results = [cpb.ToolResult(call_id=c.call_id, name=c.name, content=f"r{c.index}") for c in d.calls]
    entries = turn_entries(RUN, 1, "agent", resp, d, results)
    shapes = [
        "message"
        if e.item.HasField("message")
        else "tool_call"
        if e.item.HasField("tool_call")
        else "tool_result"
        for e in entries
    ]
    assert shapes == ["message", "tool_call", "tool_call", "tool_result", "tool_result"]
    assert [e.HasField("usage") for e in entries] == [False, False, True, False, False]
    assert entries[2].usage.requests == 1
    assert all(e.run_id == RUN and e.turn == 1 for e in entries)
    assert json.loads(entries[0].display.extra_json) == {"batch": "turn:1", "decision": "tool_calls",
                                                         "reason": "let me look"}  # fmt: skip
    assert entries[1].item.tool_call.provider_call_id == "p0"
    assert entries[3].item.source == spb.ITEM_SOURCE_TOOL


def test_entries_render_back_into_the_same_conversation():
    resp1 = response("", [("exec_command", '{"cmd": "ls"}')])
    d1 = decide(response_in(resp1), call_id=lambda i: mint_call_id(RUN, 1, i))
    res1 = [
        cpb.ToolResult(call_id=d1.calls[0].call_id, name="exec_command", content="a.txt", summary="1 file")
    ]
    resp2 = response("all done", stop=cpb.STOP_REASON_END_TURN)
    d2 = decide(response_in(resp2))
    resp_nudge = response("", stop=cpb.STOP_REASON_END_TURN)
    d_nudge = decide(response_in(resp_nudge))
    entries = stored(
        [input_entry(RUN, "agent", "list it")]
        + turn_entries(RUN, 1, "agent", resp1, d1, res1)
        + turn_entries(RUN, 2, "agent", resp_nudge, d_nudge, [])
        + turn_entries(RUN, 3, "agent", resp2, d2, [])
    )
    history = history_of(entries)
    assert isinstance(history[0], render.UserTurn) and history[0].text == "list it"
    kinds = [h.kind for h in history[1:]]
    assert kinds == [DecisionKind.TOOL_CALLS, DecisionKind.NO_TOOL_CALL, DecisionKind.FINAL]
    msgs = render.messages(history)
    roles = [m.role for m in msgs]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert msgs[2].blocks[0] == render.ToolResultBlock(d1.calls[0].call_id, "exec_command", "a.txt", False)
    assert msgs[4].blocks == [render.TextBlock(render.NUDGE_NO_TOOL_CALL)]
    proto = messages_out(msgs)
    assert proto[1].content[0].tool_use.call_id == mint_call_id(RUN, 1, 0)
    assert proto[1].content[0].tool_use.arguments == '{"cmd": "ls"}'
    # rendering twice, as another process would, gives the same bytes
    again = messages_out(render.messages(history_of(entries)))
    assert [m.SerializeToString() for m in again] == [m.SerializeToString() for m in proto]


def test_interrupted_results_render_their_own_text():
    resp = response("", [("exec_command", '{"cmd": "make"}')])
    d = decide(response_in(resp), call_id=lambda i: mint_call_id(RUN, 1, i))
    res = [cpb.ToolResult(call_id=d.calls[0].call_id, name="exec_command", content="outcome unknown",
                          is_error=True, status=cpb.TOOL_RESULT_STATUS_INTERRUPTED)]  # fmt: skip
    entries = stored([input_entry(RUN, "agent", "build")] + turn_entries(RUN, 1, "agent", resp, d, res))
    msgs = render.messages(history_of(entries))
    assert msgs[2].blocks[0].content == "outcome unknown" and msgs[2].blocks[0].is_error


def test_entries_from_elsewhere_are_tolerated():
    # a result written by RecoverSession (no run id) joins the step of its call
    resp = response("", [("read_file", '{"path": "x"}')])
    d = decide(response_in(resp), call_id=lambda i: mint_call_id(RUN, 1, i))
    entries = [input_entry(RUN, "agent", "read")] + turn_entries(RUN, 1, "agent", resp, d, [])
    recovered = cpb.ToolResult(call_id=d.calls[0].call_id, content="gone", is_error=True)
    entries.append(spb.Entry(kind="item", item=spb.Item(tool_result=recovered)))
    entries.append(spb.Entry(kind="annotation", payload_json="{}"))
    msgs = render.messages(history_of(stored(entries)))
    assert msgs[2].blocks[0].content == "gone" and msgs[2].blocks[0].is_error
