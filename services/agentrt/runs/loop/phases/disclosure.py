"""Deferred tools in the run loop (004 §2.7i): withheld until a tool result names them.

The pure rules are `core/disclosure.py`; this module reads them off a run:

- a tool is deferred when its AgentTool says so (`deferred` set), else when its ToolSpec
  does (catalog or client-declared);
- `visible` filters the current agent's tool specs to what the model may see and call
  (a deferred tool not yet disclosed is neither offered nor callable: a call to it is
  answered "not found");
- `disclose` reads a batch's results in call order: each result's `added_tools` naming
  a deferred tool of the agent discloses it, cumulatively for the rest of the run. The
  state (`RunRecord.state["disclosure"]`, `Disclosure.to_json`) is written with the save
  point that consumed the results, so a resumed or taken-over run offers the same tools.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrt.core.disclosure import Disclosure
from agentrt.runs.spec.agents import offered_specs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: State key (RunRecord.state): the disclosure record.
DISCLOSURE = "disclosure"


def deferred_names(snap: pb.AgentSpec) -> set[str]:
    """Return the names of the snapshot's deferred tools."""
    return {t.name for t in snap.tools if (t.deferred if t.HasField("deferred") else t.spec.deferred)}


def disclosure_of(state: dict[str, object]) -> Disclosure:
    """Return the run's disclosure state (nothing disclosed when absent)."""
    return Disclosure.from_json(str(state.get(DISCLOSURE, "")))


def visible(snap: pb.AgentSpec, state: dict[str, object]) -> list[cpb.ToolSpec]:
    """Return the tool specs the model may see and call this turn, in the agent's order."""
    specs = offered_specs(snap)
    deferred = deferred_names(snap)
    if not deferred:
        return specs
    shown = set(disclosure_of(state).offered([(s.name, s.name in deferred) for s in specs]))
    return [s for s in specs if s.name in shown]


def disclose(
    snap: pb.AgentSpec, state: dict[str, object], results: Sequence[cpb.ToolResult]
) -> tuple[str, list[pb.ToolsDisclosed]]:
    """Return the disclosure record after a batch and one event per disclosing result.

    Returns:
        (the new `to_json` text, ToolsDisclosed events in call order); the events are
        empty when nothing new was disclosed.
    """
    current = disclosure_of(state)
    deferred = deferred_names(snap)
    events = []
    for r in results:
        if not r.added_tools:
            continue
        current, new = current.disclose(r.added_tools, deferred)
        if new:
            events.append(pb.ToolsDisclosed(call_id=r.call_id, names=list(new)))
    return current.to_json(), events
