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
