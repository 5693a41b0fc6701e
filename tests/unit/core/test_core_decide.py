"""decide(): the five kinds, the reason cap, single-call notes, out-of-band arguments."""

from __future__ import annotations

import base64

from agentrt.core.decide import (
    NAME_BYTES,
    NOTE_BYTES,
    REASON_BYTES,
    STOP_CONTEXT_WINDOW_EXCEEDED,
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_REFUSAL,
    STOP_TOOL_USE,
    DecisionKind,
    ProposedCall,
    Response,
    classify_arguments,
    decide,
    is_overflow,
    mint_call_id,
    not_executed_note,
)
from agentrt.core.truncate import byte_len


def call(name="exec_command", args='{"cmd": "ls"}', pid="p1"):
    return ProposedCall(name, args, pid)


def test_tool_calls_keep_exact_arguments_and_mint_ids():
    args = '{"cmd":  "echo hi",   "z": 1}'
    d = decide(
        Response(
            text="listing",
            calls=[call(args=args), call("read_file", '{"path": "a"}', "p2")],
            stop_reason=STOP_TOOL_USE,
        ),
        call_id=lambda i: f"id{i}",
    )
    assert d.kind == DecisionKind.TOOL_CALLS
    assert [c.call_id for c in d.calls] == ["id0", "id1"]
    assert d.calls[0].arguments == args  # never re-serialized
    assert d.calls[1].provider_call_id == "p2"
    assert d.reason == "listing"
    assert d.not_executed == ()


def test_tool_calls_win_regardless_of_end_turn_stop():
    d = decide(Response(calls=[call()], stop_reason=STOP_END_TURN))
    assert d.kind == DecisionKind.TOOL_CALLS


def test_text_with_end_turn_is_final_and_kept_whole():
    text = "x" * 2000
    d = decide(Response(text=text, stop_reason=STOP_END_TURN))
    assert d.kind == DecisionKind.FINAL
    assert d.final_output == text
    assert byte_len(d.reason) <= REASON_BYTES


def test_text_without_stop_reason_is_final():
    assert decide(Response(text="done")).kind == DecisionKind.FINAL


def test_empty_reply_is_no_tool_call():
    for resp in (Response(), Response(text="   \n", stop_reason=STOP_END_TURN)):
        d = decide(resp)
        assert d.kind == DecisionKind.NO_TOOL_CALL
        assert d.calls == ()


def test_tool_use_stop_without_calls_is_no_tool_call():
    d = decide(Response(text="I will call a tool", stop_reason=STOP_TOOL_USE))
    assert d.kind == DecisionKind.NO_TOOL_CALL
    assert d.reason == "I will call a tool"


def test_truncated_never_carries_calls():
    d = decide(Response(text="partial", calls=[call(args='{"path": "/ho')], stop_reason=STOP_MAX_TOKENS))
    assert d.kind == DecisionKind.TRUNCATED
    assert d.calls == () and d.not_executed == ()
    assert d.dropped_calls == 1


def test_a_context_window_stop_is_an_overflow_never_a_truncation():
    """004 §2.5g: model_context_window_exceeded is an overflow; its calls never run."""
    cut = [call(args='{"path": "/ho')]
    stopped = Response(text="partial", calls=cut, stop_reason=STOP_CONTEXT_WINDOW_EXCEEDED)
    assert is_overflow(stopped)
    assert not is_overflow(Response(text="partial", stop_reason=STOP_MAX_TOKENS))
    d = decide(stopped)
    assert d.kind != DecisionKind.TRUNCATED
    assert d.calls == () and d.dropped_calls == 1


def test_refusal_wins_over_text_and_calls():
    d = decide(Response(text="some text", calls=[call()], stop_reason=STOP_REFUSAL))
    assert d.kind == DecisionKind.REFUSAL
    assert d.calls == ()
    d = decide(Response(text="hello", refusal="I can't help with that", stop_reason=STOP_END_TURN))
    assert d.kind == DecisionKind.REFUSAL
    assert d.reason == "I can't help with that"


def test_reason_is_capped_on_every_branch():
    long = "é" * 1000
    for resp in (
        Response(text=long, calls=[call()]),
        Response(text=long, stop_reason=STOP_END_TURN),
        Response(text=long, stop_reason=STOP_TOOL_USE),
        Response(text=long, stop_reason=STOP_MAX_TOKENS),
        Response(text=long, stop_reason=STOP_REFUSAL),
    ):
        assert byte_len(decide(resp).reason) <= REASON_BYTES


def test_single_call_mode_names_the_rest():
    d = decide(
        Response(text="doing", calls=[call("a"), call("write_file"), call("delete_file")]), single_call=True
    )
    assert [c.name for c in d.calls] == ["a"]
    assert [c.name for c in d.not_executed] == ["write_file", "delete_file"]
    assert "[2 further tool call(s) not executed: write_file, delete_file]" in d.reason
    assert d.reason.startswith("doing")


def test_single_call_note_survives_long_text():
    d = decide(Response(text="t" * 5000, calls=[call("a"), call("b")]), single_call=True)
    assert d.reason.endswith("[1 further tool call(s) not executed: b]")
    assert byte_len(d.reason) <= REASON_BYTES


def test_parallel_mode_keeps_all_calls():
    d = decide(Response(calls=[call("a"), call("b")]))
    assert [c.name for c in d.calls] == ["a", "b"]
    assert d.reason == ""


def test_note_caps_names_and_elides_what_does_not_fit():
    names = ["n" * 200] + [f"tool_{i:02d}" for i in range(60)]
    note = not_executed_note(names)
    assert byte_len(note) <= NOTE_BYTES
    assert note.startswith("[61 further tool call(s) not executed: ")
    assert note.endswith(", …]")
    first = note.split(": ", 1)[1].split(", ")[0]
    assert byte_len(first) <= NAME_BYTES
    assert not_executed_note([]) == ""
    assert not_executed_note(["a", "b"]) == "[2 further tool call(s) not executed: a, b]"


def test_invalid_arguments_are_out_of_band():
    assert classify_arguments('{"a": 1}') == ('{"a": 1}', "", False)
    assert classify_arguments("") == ("", "", False)
    assert classify_arguments('{"a": ') == ("", '{"a": ', False)
    assert classify_arguments("[1, 2]") == ("", "[1, 2]", False)  # not an object
    raw = b'{"a": "\xff\xfe"}'
    args, invalid, b64 = classify_arguments(raw)
    assert args == "" and b64 and base64.b64decode(invalid) == raw
    d = decide(Response(calls=[call(args="not json")]))
    assert d.calls[0].arguments == "" and d.calls[0].invalid_arguments == "not json"
    assert d.calls[0].has_invalid_arguments


def test_call_ids_are_stable_and_provider_safe():
    import re

    run_id = "run_01jd5x7k2m3n4p5q6r7s8t9v0w"
    a = mint_call_id(run_id, 3, 1)
    assert a == mint_call_id(run_id, 3, 1)  # the same whichever process mints it
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", a)
    assert mint_call_id("run_aaaaaaaaaaaaaaaaaaaaaaaaaa", 3, 1) != mint_call_id(
        "run_aaaaaaaaaaaaaabbbbbbbbbbbb", 3, 1
    )
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", mint_call_id("odd.id:x", 1, 0))
    d1 = decide(Response(calls=[call(), call()]), call_id=lambda i: mint_call_id(run_id, 2, i))
    d2 = decide(Response(calls=[call(), call()]), call_id=lambda i: mint_call_id(run_id, 2, i))
    assert [c.call_id for c in d1.calls] == [c.call_id for c in d2.calls]
