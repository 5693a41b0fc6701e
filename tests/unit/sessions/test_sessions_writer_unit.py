"""The run loop's persist boundary and usage attribution (004 §2.5 safePersistBoundary, §2.7f)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.sessions.writer import attach_usage, safe_persist_boundary
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb

USAGE = cpb.Usage(input_tokens=10, output_tokens=5, requests=1)


def msg(text: str, response_id: str = "") -> pb.Entry:
    m = cpb.Message(role=cpb.ROLE_ASSISTANT, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    return pb.Entry(kind="item", item=pb.Item(message=m), response_id=response_id)


def call(call_id: str, response_id: str = "r1") -> pb.Entry:
    return pb.Entry(
        kind="item", item=pb.Item(tool_call=cpb.ToolCall(call_id=call_id, name="t")), response_id=response_id
    )


def out(call_id: str) -> pb.Entry:
    return pb.Entry(kind="item", item=pb.Item(tool_result=cpb.ToolResult(call_id=call_id, content="ok")))


def names(entries) -> list[str]:
    result = []
    for e in entries:
        if e.item.HasField("tool_call"):
            result.append("call:" + e.item.tool_call.call_id)
        elif e.item.HasField("tool_result"):
            result.append("out:" + e.item.tool_result.call_id)
        else:
            result.append(e.kind if e.kind != "item" else "msg")
    return result


def test_a_complete_turn_is_persisted_whole():
    turn = [msg("hi", "r1"), call("a"), call("b"), out("a"), out("b")]
    b = safe_persist_boundary(turn)
    assert names(b.persist) == names(turn) and b.held == []


def test_a_call_without_its_output_is_held_back():
    turn = [msg("hi", "r1"), call("a"), call("b"), out("a")]
    b = safe_persist_boundary(turn)
    assert names(b.persist) == ["msg", "call:a", "out:a"]
    assert names(b.held) == ["call:b"]


def test_outputs_persisted_earlier_count_as_answered():
    b = safe_persist_boundary([call("a"), pb.Entry(kind="annotation")], answered=["a"])
    assert names(b.persist) == ["call:a", "annotation"] and b.held == []


def test_usage_moves_from_a_held_call_to_the_last_persisted_entry_of_its_response():
    turn = attach_usage([msg("hi", "r1"), call("a"), call("b")], "r1", USAGE) + [out("a")]
    assert [e.HasField("usage") for e in turn] == [False, False, True, False]
    b = safe_persist_boundary(turn)
    assert [e.HasField("usage") for e in b.persist] == [False, True, False]
    assert b.persist[1].usage == USAGE
    assert not b.held[0].HasField("usage")
    # The inputs were not modified.
    assert turn[2].HasField("usage") and not turn[1].HasField("usage")
    # Later, the held call goes out with its output and no usage: counted once overall.
    later = safe_persist_boundary([*b.held, out("b")])
    assert not any(e.HasField("usage") for e in later.persist)


def test_usage_stays_on_the_held_call_when_nothing_of_its_response_is_written():
    b = safe_persist_boundary(attach_usage([call("a")], "r1", USAGE))
    assert b.persist == [] and b.held[0].usage == USAGE


def test_attach_usage_marks_only_the_last_entry_of_the_response():
    entries = [msg("x", "r0"), msg("y", "r1"), call("a", "r1"), out("a")]
    marked = attach_usage(entries, "r1", USAGE)
    assert [e.HasField("usage") for e in marked] == [False, False, True, False]
    assert not any(e.HasField("usage") for e in entries)
    assert [e.HasField("usage") for e in attach_usage([msg("a"), msg("b")], "", USAGE)] == [False, True]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["msg", "call", "out"]), st.integers(0, 5)), max_size=30))
def test_persisted_never_holds_a_call_without_its_output(script):
    turn = []
    for kind, n in script:
        turn.append(msg(str(n), "r1") if kind == "msg" else call(f"c{n}") if kind == "call" else out(f"c{n}"))
    b = safe_persist_boundary(turn)
    answered = {e.item.tool_result.call_id for e in b.persist if e.item.HasField("tool_result")}
    assert all(e.item.tool_call.call_id in answered for e in b.persist if e.item.HasField("tool_call"))
    assert len(b.persist) + len(b.held) == len(turn)
    assert all(e.item.HasField("tool_call") for e in b.held)
