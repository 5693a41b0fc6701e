"""The session side of the save point: what a turn writes, written exactly once (004 §2.5, §2.3a).

Entry shapes (all kind "item", all with run_id and turn; see docs/services/runs.md):
- the run input: a user message, source USER, written just before the first model call;
- per turn, in one AppendEntries call: the assistant message (the model's text and
  thinking blocks; display.extra_json carries {"decision", "reason"}), then one tool_call
  entry per executed call, then one tool_result entry per call in call order, then any
  runtime's own user message (a recovery prompt, source RUNTIME), then any
  injected input consumed at this save point (user messages, source USER). The turn's
  usage rides on the last entry the model produced (004 §2.7f).

Every entry's display.extra_json also names its batch ("input" or "turn:N"). A batch is
appended with expected_last_seq; when that no longer holds the entries after it are read:
a previous attempt of the same save point that got through before the process died is
recognised and not written twice, and foreign entries are handled by the rule of
docs/decisions/0003 (`write_batch`). Diagnostics of a turn ride on its batch's last entry
(display.extra_json "diagnostics", 004 §2.11d).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrt.core.decide import Decision, DecisionKind
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.convert.model import call_out, display_extra, preserved_of, text_of
from agentrt.runs.peers.client import Peers
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


def runtime_user_entry(run_id: str, turn: int, agent: str, text: str, title: str) -> spb.Entry:
    """Return a user message the runtime itself writes at turn's save point (source RUNTIME).

    Used for the recovery prompt after a rejected final output (004 §2.3): the next turn
    reads it like any user message; the entry's title says what it is.
    """
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    item = spb.Item(message=msg, source=spb.ITEM_SOURCE_RUNTIME, agent=agent)
    entry = _entry(run_id, turn, item, f"turn:{turn}", runtime=title)
    entry.display.title = title
    return entry


def attach_diagnostics(entries: Sequence[spb.Entry], diagnostics: Sequence[dict[str, object]]) -> None:
    """Put a turn's diagnostics on its batch's last entry (004 §2.11d), in place."""
    if not entries or not diagnostics:
        return
    last = entries[-1]
    extra = display_extra(last)
    extra["diagnostics"] = list(diagnostics)
    last.display.extra_json = json.dumps(extra)


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


#: Kinds of a foreign entry that change what the model reads (the rest are folded away).
_VIEW_KINDS = frozenset({"item", "compaction", "leaf"})
#: Rounds of "someone else appended meanwhile" a batch write goes through before it fails.
_WRITE_ROUNDS = 5


@dataclass
class Written:
    """How a batch reached the session.

    Attributes:
        last_seq: the highest session seq after the write (the run's next guard).
        count: entries in the batch.
        stored: the entries as stored, in order, when they extend the view read before the
            write; None when they do not (written by an earlier attempt, or after a branch
            switch): the caller then reads the view again.
        injected: ids of the injected input the stored batch carries (004 §2.11b: consumed
            is what the session holds, never what this attempt meant to write).
        branched: ids of foreign entries the batch was written beside, on a sibling branch
            (decision 0010); [] normally.
        tail: with `with_tail`, the log after the stored batch as of its commit, as the
            session store answered it ((raw entries in seq order, the highest seq stored);
            decision 0057); None when not answered (not asked, an older store, or `stored`
            is None).
    """

    last_seq: int
    count: int
    stored: list[spb.Entry] | None
    injected: list[str] = field(default_factory=list)
    branched: list[str] = field(default_factory=list)
    tail: tuple[list[spb.Entry], int] | None = None


def _injected_ids(entries: Sequence[spb.Entry]) -> list[str]:
    out = []
    for entry in entries:
        value = display_extra(entry).get("injection_id")
        if isinstance(value, str) and value:
            out.append(value)
    return out


async def write_batch(
    peers: Peers,
    tenant: str,
    session_id: str,
    entries: Sequence[spb.Entry],
    expected_last_seq: int,
    *,
    request_leaf: str | None = None,
    with_tail: bool = False,
) -> Written:
    """Append a batch exactly once, where its request was built (docs/decisions/0003).

    The batch is recognised by its entries' run_id and display batch name, so a batch an
    earlier attempt wrote (the process died before recording it) is never written twice.
    When other writers appended since `expected_last_seq`:
    - entries that change nothing the model reads (updates, annotations, custom kinds) are
      stepped over: the batch goes after them, as its request would have been the same;
    - entries that do (items, checkpoints, leaf moves): with `request_leaf` (a turn's batch,
      whose request was built from the view ending at that leaf) the batch lands on its own
      branch, under that leaf (a leaf move, then the append), and the foreign entries stay
      on theirs (`branched`); without it (the run's input, which precedes its request) the
      batch goes after them.

    Args:
        peers: the session store.
        tenant: the run's tenant.
        session_id: the session.
        entries: the batch in order (all with the run's id and one batch name).
        expected_last_seq: the highest seq the batch's request (or the run) had read.
        request_leaf: the active leaf the request was built from; None for the input.
        with_tail: ask the store for the log after the batch too (`Written.tail`): the
            next turn's tail read, done by the append (docs/decisions/0020-append-returns-the-tail.md).

    Returns:
        How the batch was written (Written).

    Raises:
        MeshError: the session store's errors other than a lost guard; ABORTED/SEQ_MISMATCH
            when other writers kept appending for _WRITE_ROUNDS rounds.
    """
    if not entries:
        return Written(expected_last_seq, 0, [])
    run_id, batch = entries[0].run_id, display_extra(entries[0]).get("batch")
    guard = expected_last_seq
    branched: list[str] = []
    extends = True
    for _ in range(_WRITE_ROUNDS):
        try:
            stored, tail = await peers.append_with_tail(tenant, session_id, entries, guard, with_tail)
        except MeshError as err:
            if err.status != Status.ABORTED:
                raise
        else:
            return Written(
                max(e.seq for e in stored),
                len(stored),
                stored if extends else None,
                _injected_ids(stored),
                branched,
                tail if extends else None,
            )
        later, last_seq = await peers.tail(tenant, session_id, guard)
        mine = [e for e in later if e.run_id == run_id and display_extra(e).get("batch") == batch]
        if mine:
            return Written(last_seq, len(mine), None, _injected_ids(mine), branched)
        foreign = [e for e in later if e.kind in _VIEW_KINDS and not e.run_id == run_id]
        extends = False
        if foreign and request_leaf:
            branched.extend(e.entry_id for e in foreign if e.entry_id not in branched)
            moved = await peers.switch_branch(tenant, session_id, request_leaf)
            guard = moved.seq
        else:
            guard = last_seq
    raise MeshError(
        Status.ABORTED,
        Reason.SEQ_MISMATCH,
        f"other writers kept appending to session {session_id!r}; the turn's batch was not written",
    )


async def repair_session(
    peers: Peers, tenant: str, session_id: str, specs: Sequence[cpb.ToolSpec]
) -> list[spb.Entry]:
    """Close the dangling tool calls on the session's active branch (004 §2.5h).

    Calls of retry-safe tools (the catalog's flag, as the snapshot copied it) are left for
    the next request, which renders them as interrupted; every other call gets the
    session store's synthesized "interrupted: outcome unknown" output. Idempotent: a second
    repair finds nothing dangling and appends nothing.

    Returns:
        The appended outputs (empty when nothing dangled).
    """
    retry_safe = sorted({s.name for s in specs if s.retry_safe})
    return await peers.recover(tenant, session_id, retry_safe)
