"""The session side of the save point: what a turn writes, written exactly once (004 §2.5, §2.3a).

Entry shapes (all kind "item", all with run_id and turn; see docs/services/runs.md):
- the run input: a user message, source USER, written just before the first model call;
- per turn, in one AppendEntries call: the assistant message (the model's text and
  thinking blocks; display.extra_json carries {"decision", "reason"}), then one tool_call
  entry per executed call, then one tool_result entry per call in call order, then any
  injected input consumed at this save point (user messages, source USER). The turn's
  usage rides on the last entry the model produced (004 §2.7f).

Every entry's display.extra_json also names its batch ("input" or "turn:N"). A batch is
appended with expected_last_seq; when that no longer holds (a previous attempt of the same
save point got through before the process died) the entries after it are read and the
batch is not written twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentrt.core.decide import Decision, DecisionKind
from agentrt.core.errors import MeshError, Status
from agentrt.runs.convert import call_out, display_extra, preserved_of, text_of
from agentrt.runs.peers import Peers
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as spb


def _entry(run_id: str, turn: int, item: spb.Item, batch: str, **extra: object) -> spb.Entry:
    display = spb.Display(extra_json=json.dumps({"batch": batch, **extra}))
    return spb.Entry(kind="item", item=item, run_id=run_id, turn=turn, display=display)


def input_entry(run_id: str, agent: str, text: str) -> spb.Entry:
    """Return the entry of the run's input (turn 1, source USER)."""
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    entry = _entry(run_id, 1, spb.Item(message=msg, source=spb.ITEM_SOURCE_USER, agent=agent), "input")
    entry.display.title = "input"
    return entry


def injected_entry(run_id: str, turn: int, agent: str, text: str, injection_id: str) -> spb.Entry:
    """Return the entry of input injected into the run and consumed at turn's save point."""
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    item = spb.Item(message=msg, source=spb.ITEM_SOURCE_USER, agent=agent)
    entry = _entry(run_id, turn, item, f"turn:{turn}", injection_id=injection_id)
    entry.display.title = "injected input"
    return entry


#: details_json of a result the runtime wrote itself (unknown tool, denial, not executed).
RUNTIME_DETAILS = '{"source": "runtime"}'


def _synthesized(result: cpb.ToolResult) -> bool:
    return result.details_json == RUNTIME_DETAILS


def turn_entries(
    run_id: str,
    turn: int,
    agent: str,
    response: cpb.ModelResponse,
    decision: Decision,
    results: Sequence[cpb.ToolResult],
) -> list[spb.Entry]:
    """Return the entries of one turn in write order (see the module docstring).

    Args:
        run_id: the run.
        turn: the turn number, from 1.
        agent: the agent's name.
        response: the model's response of the turn.
        decision: its decision.
        results: the results of decision.calls, in call order.
    """
    batch = f"turn:{turn}"
    entries: list[spb.Entry] = []
    text = text_of(response.content)
    if text or decision.reason or decision.kind != DecisionKind.TOOL_CALLS or preserved_of(response.content):
        msg = cpb.Message(role=cpb.ROLE_ASSISTANT, content=[*preserved_of(response.content)])
        if text:
            msg.content.append(cpb.ContentBlock(text=cpb.TextBlock(text=text)))
        entry = _entry(
            run_id,
            turn,
            spb.Item(message=msg, source=spb.ITEM_SOURCE_MODEL, agent=agent),
            batch,
            decision=str(decision.kind),
            reason=decision.reason,
        )
        entry.display.title = str(decision.kind)
        entries.append(entry)
    for call in decision.calls:
        entry = _entry(
            run_id, turn, spb.Item(tool_call=call_out(call), source=spb.ITEM_SOURCE_MODEL, agent=agent), batch
        )
        entry.display.title = call.name
        entries.append(entry)
    for entry in entries:
        entry.response_id = response.response_id
    if entries:
        usage = entries[-1].usage
        usage.CopyFrom(response.usage)
        usage.requests = usage.requests or 1
    for result in results:
        source = spb.ITEM_SOURCE_RUNTIME if _synthesized(result) else spb.ITEM_SOURCE_TOOL
        entry = _entry(run_id, turn, spb.Item(tool_result=result, source=source, agent=agent), batch)
        entry.display.title = result.name
        entry.display.summary = result.summary
        entries.append(entry)
    return entries


async def write_batch(
    peers: Peers, tenant: str, session_id: str, entries: Sequence[spb.Entry], expected_last_seq: int
) -> tuple[int, int, list[spb.Entry] | None]:
    """Append a batch once.

    The batch is recognised by its entries' run_id and display batch name.

    Returns:
        (highest session seq after it, entries in the batch, the entries as stored, or
        None when a previous attempt had written them and they were not read back here).

    Raises:
        MeshError: the session store's error other than the handled SEQ_MISMATCH.
    """
    if not entries:
        return expected_last_seq, 0, []
    try:
        stored = await peers.append(tenant, session_id, entries, expected_last_seq)
    except MeshError as err:
        if err.status != Status.ABORTED:
            raise
        later = await peers.entries_after(tenant, session_id, expected_last_seq)
        run_id, batch = entries[0].run_id, display_extra(entries[0]).get("batch")
        mine = [e for e in later if e.run_id == run_id and display_extra(e).get("batch") == batch]
        if mine:
            return max(e.seq for e in later), len(mine), None
        stored = await peers.append(tenant, session_id, entries, None)
    return max(e.seq for e in stored), len(stored), stored
