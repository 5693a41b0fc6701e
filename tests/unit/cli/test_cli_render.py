"""RunRenderer: what `agentrt run` prints for events whose wording users read literally."""

from __future__ import annotations

import io

from rich.console import Console

from agentrt.cli.render import RunRenderer
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


def test_a_guardrail_result_names_the_guardrail_stage_and_decision():
    tripped = pb.GuardrailResult(
        guardrail="no_rm",
        stage=pb.GUARDRAIL_STAGE_TOOL_INPUT,
        decision=pb.GUARDRAIL_DECISION_TRIP,
        message="rm is not allowed",
        call_id="call_1",
    )
    assert "guardrail no_rm (tool_input call_1): trip rm is not allowed" in _printed(
        pb.RunEvent(run_id="r", guardrail_result=tripped)
    )
    allowed = pb.GuardrailResult(
        guardrail="j", stage=pb.GUARDRAIL_STAGE_OUTPUT, decision=pb.GUARDRAIL_DECISION_ALLOW
    )
    assert "guardrail j (output): allow" in _printed(pb.RunEvent(run_id="r", guardrail_result=allowed))
    failed = pb.GuardrailResult(
        guardrail="j", stage=pb.GUARDRAIL_STAGE_INPUT, error="the judge model failed: down"
    )
    assert "guardrail j (input): error the judge model failed: down" in _printed(
        pb.RunEvent(run_id="r", guardrail_result=failed)
    )
    cancelled = pb.GuardrailResult(
        guardrail="slow", stage=pb.GUARDRAIL_STAGE_INPUT, error="cancelled: another ..."
    )
    assert "guardrail slow (input): cancelled" in _printed(
        pb.RunEvent(run_id="r", guardrail_result=cancelled)
    )
