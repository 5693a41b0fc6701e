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


def test_a_child_run_and_a_call_waiting_in_it_are_named():
    linked = pb.ChildRunLinked(call_id="call_1", child_run_id="run_kid", agent_name="helper", agent_version=2)
    text = _printed(pb.RunEvent(run_id="run_1", child_run_linked=linked))
    assert "child run run_kid" in text and "agent helper v2" in text and "call_1" in text
    waiting = pb.PendingCall(call=cpb.ToolCall(call_id="call_9", name="exec_command"), run_id="run_kid")
    text = _printed(pb.RunEvent(run_id="run_1", run_suspended=pb.RunSuspended(pending_calls=[waiting])))
    assert "exec_command [call_9] in child run run_kid" in text
