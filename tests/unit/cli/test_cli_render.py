"""RunRenderer: what `agentrt run` prints for events whose wording users read literally."""

from __future__ import annotations

import io

from rich.console import Console

from agentrt.cli.render import RunRenderer
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


def _printed(event: pb.RunEvent) -> str:
    out = io.StringIO()
    RunRenderer(Console(file=out, width=200, color_system=None)).show(event)
    return out.getvalue()


def test_a_gap_after_a_takeover_is_an_upper_bound_not_a_count_of_lost_events():
    # a takeover skips the dead replica's whole seq reservation, most of it never written
    text = _printed(pb.RunEvent(run_id="run_1", seq=521, gap=pb.EventGap(last_good=8, dropped=512, next=521)))
    assert "were lost" not in text
    assert "up to 512 event(s) after seq 8" in text and "next is 521" in text


# -- the turn contract's events, as a run's channel numbers them (runs/events/channel.py) --


def _events(*payloads: dict) -> list[pb.RunEvent]:
    """Number the payloads through a real RunChannel (each dict: {"turn": n, <kind>: message})."""
    from agentrt.runs.events.hub import EventHub

    channel = EventHub().open("run_parent", "default", "ses_1", 0, 0)
    out = []
    for p in payloads:
        p = dict(p)
        turn = p.pop("turn", 1)
        out.append(channel.publish(turn, **p).event)
    return out


def _shown(events: list[pb.RunEvent], width: int = 80) -> list[str]:
    out = io.StringIO()
    renderer = RunRenderer(Console(file=out, width=width, color_system=None))
    for e in events:
        renderer.show(e)
    return out.getvalue().splitlines()


def _fits(lines: list[str], width: int = 80) -> None:
    from rich.cells import cell_len

    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, too_wide


LONG_ID = "run_01jd" + "x" * 18


def test_a_child_run_its_progress_and_its_result_read_at_80_columns():
    call = cpb.ToolCall(
        call_id="call_abc_1_0", name="ask_researcher", arguments='{"input": "find the invoice"}'
    )
    lines = _shown(
        _events(
            {"tool_called": pb.ToolCalled(call=call)},
            {
                "child_run_linked": pb.ChildRunLinked(
                    call_id=call.call_id,
                    child_run_id=LONG_ID,
                    agent_name="researcher",
                    agent_version=3,
                    session_id="ses_hidden",
                )
            },
            {
                "tool_progressed": pb.ToolProgressed(
                    call_id=call.call_id, stream="stdout", text="reading a\nreading b\n"
                )
            },
            {
                "tool_progressed": pb.ToolProgressed(
                    call_id="call_other", stream="stdout", text="plain output"
                )
            },
            {
                "tool_returned": pb.ToolReturned(
                    result=cpb.ToolResult(
                        call_id=call.call_id,
                        name=call.name,
                        content="invoice 42 is paid",
                        status=cpb.TOOL_RESULT_STATUS_OK,
                        child_run_id=LONG_ID,
                    )
                )
            },
        )
    )
    _fits(lines)
    text = "\n".join(lines)
    linked = next(line for line in lines if line.startswith("↳ child run"))
    assert "researcher v3" in linked and LONG_ID in text
    # the child's progress is marked with its agent, line by line; other calls' is not
    assert "  researcher │ reading a" in lines and "  researcher │ reading b" in lines
    assert "plain output" in lines
    assert f"← ask_researcher ok  [child run {LONG_ID}]" in lines
    assert "invoice 42 is paid" in text


def test_guardrail_results_of_every_decision_read_at_80_columns():
    d = pb.GuardrailResult
    lines = _shown(
        _events(
            {
                "guardrail_result": d(
                    guardrail="no_secrets",
                    stage=pb.GUARDRAIL_STAGE_INPUT,
                    decision=pb.GUARDRAIL_DECISION_ALLOW,
                    scope="agent",
                    message="looks fine",
                )
            },
            {
                "guardrail_result": d(
                    guardrail="redact",
                    stage=pb.GUARDRAIL_STAGE_TOOL_OUTPUT,
                    decision=pb.GUARDRAIL_DECISION_REPLACE,
                    scope="tool",
                    call_id="call_abc_2_0",
                    message="[redacted]",
                )
            },
            {
                "guardrail_result": d(
                    guardrail="judge",
                    stage=pb.GUARDRAIL_STAGE_OUTPUT,
                    decision=pb.GUARDRAIL_DECISION_TRIP,
                    scope="agent",
                    message="the answer leaks a password " + "very " * 30 + "badly",
                )
            },
            {
                "guardrail_result": d(
                    guardrail="slow",
                    stage=pb.GUARDRAIL_STAGE_TOOL_INPUT,
                    error="pattern (a|a)+$ ran out of its 50 ms budget",
                )
            },
        )
    )
    _fits(lines)
    text = "\n".join(lines)
    assert "◆ guardrail no_secrets · input (agent) · allowed" in lines
    assert "looks fine" not in text  # an allow's reason is noise on a live view
    replaced = next(line for line in lines if "redact" in line)
    assert "tool output (tool) · replaced" in replaced and "[call_abc_2_0]" in replaced
    assert "  [redacted]" in lines
    assert "◆ guardrail judge · output (agent) · tripped" in lines
    tripped = lines.index("◆ guardrail judge · output (agent) · tripped")
    assert lines[tripped + 1].startswith("  the answer leaks a password very")
    assert lines[tripped + 2].startswith("  very")  # wrapped lines keep the indent
    assert "◆ guardrail slow · tool input · undecided" in lines
    assert "  could not decide: pattern (a|a)+$ ran out of its 50 ms budget" in lines


def test_a_handoff_its_call_and_the_ignored_ones():
    call = cpb.ToolCall(call_id="call_abc_1_1", name="transfer_to_billing", arguments='{"reason": "invoice"}')
    lines = _shown(
        _events(
            {"tool_called": pb.ToolCalled(call=call, handoff=True)},
            {
                "handoff_requested": pb.HandoffRequested(
                    call_id=call.call_id,
                    from_agent="triage",
                    to_agent="billing",
                    to_agent_version=2,
                    arguments=call.arguments,
                    ignored_call_ids=["call_abc_1_2"],
                )
            },
            {"stop_requested": pb.StopRequested(reason="enough")},
            {"tools_disclosed": pb.ToolsDisclosed(call_id="c", names=["deep_search", "fetch"])},
        )
    )
    _fits(lines)
    assert lines[0].startswith("→ transfer_to_billing (handoff) ")
    assert lines[1] == "⇒ handoff triage → billing v2  [call_abc_1_1]"
    assert lines[2] == '  input {"reason": "invoice"}'
    assert lines[3] == "  1 further handoff call ignored (the first wins)"
    assert "· stop requested: enough; the run ends after this turn" in lines
    assert "· tools disclosed: deep_search, fetch" in lines


def test_a_pending_call_inside_a_child_run_names_the_child():
    pending = pb.PendingCall(
        call=cpb.ToolCall(call_id="call_child_1_0", name="exec_command"),
        kind=pb.PENDING_CALL_KIND_APPROVAL,
        run_id="run_child",
        parent_call_id="call_abc_1_0",
    )
    lines = _shown(_events({"run_suspended": pb.RunSuspended(pending_calls=[pending])}))
    _fits(lines)
    assert "exec_command [call_child_1_0] in child run run_child" in " ".join(lines)
