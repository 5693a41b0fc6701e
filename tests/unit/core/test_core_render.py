"""render.messages(): opening, steps, nudges, the window over rendered steps, caps, ids."""

from __future__ import annotations

import json

import pytest

from agentrt.core.decide import Call, DecisionKind, ProposedCall, Response, decide, mint_call_id
from agentrt.core.render import (
    CONTINUATION_OPENING,
    INTERRUPTED_TEXT,
    NO_TOOL_CALL_TEXT,
    NUDGE_NO_TOOL_CALL,
    NUDGE_TRUNCATED,
    ROLE_ASSISTANT,
    ROLE_SYSTEM,
    ROLE_USER,
    Observation,
    PreservedBlock,
    Step,
    Summary,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserTurn,
    args_json,
    messages,
)
from agentrt.core.truncate import MARK, byte_len

RUN = "run_01jd5x7k2m3n4p5q6r7s8t9v0w"


def tool_step(
    turn: int,
    content: str,
    *,
    summary: str = "",
    name: str = "exec_command",
    error: bool = False,
    reason: str = "",
) -> Step:
    cid = mint_call_id(RUN, turn, 0)
    return Step(
        DecisionKind.TOOL_CALLS,
        reason=reason,
        calls=(Call(0, cid, name, '{"cmd": "ls"}'),),
        observations={cid: Observation(content, error, summary)},
    )


def test_opening_then_two_messages_per_step():
    msgs = messages(
        [
            UserTurn("do it"),
            tool_step(1, "out", reason="listing"),
            Step(DecisionKind.FINAL, reason="done", final_output="done"),
        ]
    )
    assert [m.role for m in msgs] == [ROLE_USER, ROLE_ASSISTANT, ROLE_USER, ROLE_ASSISTANT]
    assert msgs[0].blocks == [TextBlock("do it")]
    cid = mint_call_id(RUN, 1, 0)
    assert msgs[1].blocks == [TextBlock("listing"), ToolUseBlock(cid, "exec_command", '{"cmd": "ls"}')]
    assert msgs[2].blocks == [ToolResultBlock(cid, "exec_command", "out", False)]
    assert msgs[3].blocks == [TextBlock("done")]


def test_nothing_to_render_is_an_error():
    with pytest.raises(ValueError):
        messages([])
    with pytest.raises(ValueError):
        messages([Summary("only a summary")])


def test_a_view_opening_with_a_model_step_gets_an_opening():
    """A checkpoint may leave the view opening with a step; the request still opens with a user turn."""
    msgs = messages([tool_step(1, "x")])
    assert msgs[0].role == ROLE_USER and msgs[0].blocks == [TextBlock(CONTINUATION_OPENING)]
    assert [m.role for m in msgs] == [ROLE_USER, ROLE_ASSISTANT, ROLE_USER]


def test_summaries_render_up_front_as_system_messages():
    msgs = messages([tool_step(1, "x"), Summary("first summary"), UserTurn("next"), Summary("second")])
    assert [m.role for m in msgs[:2]] == [ROLE_SYSTEM, ROLE_SYSTEM]
    assert msgs[0].blocks == [TextBlock("first summary")] and msgs[1].blocks == [TextBlock("second")]
    assert msgs[2].role == ROLE_USER and msgs[2].blocks == [TextBlock(CONTINUATION_OPENING)]
    assert msgs[-1].role == ROLE_USER and TextBlock("next") in msgs[-1].blocks


def test_error_flag_on_failed_results():
    msgs = messages([UserTurn("go"), tool_step(1, "boom", error=True)])
    assert msgs[2].blocks[0].is_error is True


def test_step_without_decision_is_skipped():
    msgs = messages([UserTurn("go"), Step(None, reason="ignored"), tool_step(1, "ok")])
    assert len(msgs) == 3
    assert all("ignored" not in str(b) for m in msgs for b in m.blocks)


def test_no_tool_call_and_truncated_render_nudges():
    msgs = messages(
        [UserTurn("go"), Step(DecisionKind.NO_TOOL_CALL), Step(DecisionKind.TRUNCATED, reason="half")]
    )
    assert msgs[1].blocks == [TextBlock(NO_TOOL_CALL_TEXT)]
    assert msgs[2].blocks == [TextBlock(NUDGE_NO_TOOL_CALL)]
    assert msgs[3].blocks == [TextBlock("half")]
    assert msgs[4].blocks == [TextBlock(NUDGE_TRUNCATED)]


def test_window_shows_recent_results_in_full_and_older_by_summary():
    steps = [tool_step(i, f"content {i}", summary=f"summary {i}") for i in range(1, 9)]
    msgs = messages([UserTurn("go"), *steps], recent_results=6)
    results = [
        m.blocks[0].content for m in msgs if m.role == ROLE_USER and isinstance(m.blocks[0], ToolResultBlock)
    ]
    assert results == ["summary 1", "summary 2"] + [f"content {i}" for i in range(3, 9)]


def test_window_counts_rendered_steps_only():
    # a step with no decision takes no place: the last six results are still in full
    steps = [tool_step(i, f"content {i}", summary=f"summary {i}") for i in range(1, 7)]
    history = [UserTurn("go"), steps[0], steps[1], Step(None), steps[2], steps[3], steps[4], steps[5]]
    results = [m.blocks[0].content for m in messages(history) if isinstance(m.blocks[0], ToolResultBlock)]
    assert results == [f"content {i}" for i in range(1, 7)]


def test_old_result_without_summary_shows_a_short_head():
    steps = [tool_step(1, "x" * 1000)] + [tool_step(i, "ok") for i in range(2, 4)]
    msgs = messages([UserTurn("go"), *steps], recent_results=2)
    first = msgs[2].blocks[0].content
    assert first.endswith(MARK) and byte_len(first) <= 256


def test_results_are_capped_with_truncate():
    msgs = messages([UserTurn("go"), tool_step(1, "é" * 100)], result_max_bytes=21)
    content = msgs[2].blocks[0].content
    assert byte_len(content) <= 21 and content.endswith(MARK)


def test_interrupted_results_say_what_is_known_and_missing_ones_promise_nothing():
    """An interrupted result's own text is shown; a call with no result gets the neutral sentence."""
    cid = mint_call_id(RUN, 1, 0)
    step = Step(
        DecisionKind.TOOL_CALLS,
        calls=(Call(0, cid, "read_file", "{}"), Call(1, "c2", "list_files"), Call(2, "c3", "exec_command")),
        observations={
            cid: Observation("the outcome is unknown", is_error=True, interrupted=True),
            "c3": Observation("", interrupted=True),
        },
    )
    msgs = messages([UserTurn("go"), step])
    shown = [b.content for b in msgs[2].blocks]
    assert shown == ["the outcome is unknown", INTERRUPTED_TEXT, INTERRUPTED_TEXT]
    assert all(b.is_error for b in msgs[2].blocks)
    assert "own record" not in INTERRUPTED_TEXT  # a repeated call is a new call
    assert msgs[1].blocks[1].input_json == "{}"  # no arguments render as {}


def test_invalid_arguments_render_out_of_band_object():
    d = decide(Response(calls=[ProposedCall("write_file", '{"path": "a", ')]), call_id=lambda i: "c0")
    assert json.loads(args_json(d.calls[0])) == {"invalid_json": '{"path": "a", '}
    d = decide(Response(calls=[ProposedCall("write_file", b"\xff\xfe")]), call_id=lambda i: "c0")
    assert json.loads(args_json(d.calls[0])) == {"invalid_json_base64": "//4="}


def test_parallel_results_in_call_order_and_merged_user_input():
    calls = (Call(0, "a", "t1"), Call(1, "b", "t2"))
    step = Step(
        DecisionKind.TOOL_CALLS, calls=calls, observations={"b": Observation("B"), "a": Observation("A")}
    )
    msgs = messages([UserTurn("go"), step, UserTurn("also this")])
    assert len(msgs) == 3
    assert [type(b).__name__ for b in msgs[2].blocks] == ["ToolResultBlock", "ToolResultBlock", "TextBlock"]
    assert [b.content for b in msgs[2].blocks[:2]] == ["A", "B"]


def test_follow_up_run_renders_previous_answer_in_full():
    answer = "long answer " * 100
    msgs = messages(
        [UserTurn("q1"), Step(DecisionKind.FINAL, reason=answer[:500], final_output=answer), UserTurn("q2")]
    )
    assert msgs[1].blocks == [TextBlock(answer)]
    assert msgs[2].blocks == [TextBlock("q2")]


def test_preserved_blocks_lead_the_assistant_turn():
    step = Step(DecisionKind.FINAL, final_output="hi", preserved=("thinking-block",))
    msgs = messages([UserTurn("go"), step])
    assert msgs[1].blocks == [PreservedBlock("thinking-block"), TextBlock("hi")]


def test_replay_is_stable():
    # the same recorded history renders identically in any process: ids come from the log
    def build():
        d = decide(
            Response(text="t", calls=[ProposedCall("exec_command", '{"cmd":"ls"}', "prov_x")]),
            call_id=lambda i: mint_call_id(RUN, 4, i),
        )
        return [
            UserTurn("go"),
            Step(d.kind, d.reason, calls=d.calls, observations={d.calls[0].call_id: Observation("ok")}),
        ]

    assert messages(build()) == messages(build())
    use = messages(build())[1].blocks[1]
    assert use.call_id == mint_call_id(RUN, 4, 0) and "prov_x" not in use.call_id
