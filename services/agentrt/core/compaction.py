"""Compaction planning: what a pass folds, when to run one, what the summary model reads.

Pure (standard library only); the run loop feeds it the session's context view as `Unit`s
and does the I/O (004 §2.5f; 002 History Policies).

- Grouping. The view is cut into groups that are never split: a model step (its assistant
  message, its tool calls and their results: entries sharing a run and a turn, and a
  result joins its call's group wherever it sits) or one user message. So a pass never
  separates a tool call from its result: a cut that would fall between them includes the
  whole group on the kept side.
- Planning. The newest `keep_turns` step groups and everything after the first of them
  stay exact; older groups are folded, except the last user message before the cut (the
  task the kept steps work on stays in the model's own words). Every live checkpoint in
  the view is folded too: the new summary carries what they carried.
- Triggers (ORed, as 002's CompressAtTurns and CompressAtMaxInputTokens): the estimated
  input of the next request above `trigger_tokens` (exclusive: equal fits), or more step
  groups than `trigger_turns`.
- Weight. A pass that recovers an overflow must make the context strictly lighter (004
  §2.5g): bytes of the entries' bodies are the measure (a conservative proxy for tokens).
- Evidence. The folded entries go to the summary model as quoted records, not as a
  conversation to continue (002 "Evidence supplied to the summary model"), each body
  capped so the summary request itself stays inside the budget it is given.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.core.truncate import byte_len, truncate

USER = "user"
STEP = "step"
CHECKPOINT = "checkpoint"
OTHER = "other"

DEFAULT_KEEP_TURNS = 4
#: Share of the context window above which the token trigger fires when none is given.
DEFAULT_TRIGGER_SHARE = 0.75
#: Bytes per token assumed by estimates (the usual 4 for English text and JSON).
BYTES_PER_TOKEN = 4

SUMMARY_INSTRUCTIONS = (
    "You maintain the memory of an agent's long conversation. You are given earlier parts of it "
    "as quoted records (and any summary written before). Write a concise summary the agent can "
    "continue from: the user's goals and constraints, what was done and found (commands run, "
    "files changed, results and errors that still matter), decisions taken, and what remains to "
    "do. Keep exact names, paths, identifiers and numbers. Do not continue the conversation, do "
    "not call tools, do not address the user: reply with the summary text only."
)
#: Opens the summary request's one user message.
EVIDENCE_HEADER = "Earlier conversation to summarize, as JSON records in order:"
#: Prefix of the summary as the model later reads it (a system message).
SUMMARY_PREFIX = "[Conversation summary] "


@dataclass(frozen=True)
class Unit:
    """One entry of the context view as compaction sees it.

    Attributes:
        entry_id: the session entry id.
        kind: USER (a user message), STEP (assistant message, tool call or tool result),
            CHECKPOINT (a compaction entry) or OTHER (anything else shown).
        group: the step's key ("<run_id>/<turn>" or any string shared by one step's
            entries); ignored for other kinds.
        call_id: for a tool call or result, its call id ("" otherwise).
        is_result: True for a tool result.
        size_bytes: bytes of the entry's body (what the model reads of it).
    """

    entry_id: str
    kind: str
    group: str = ""
    call_id: str = ""
    is_result: bool = False
    size_bytes: int = 0


@dataclass(frozen=True)
class Plan:
    """What one pass folds.

    Attributes:
        folded: entry ids to fold, in view order (checkpoints included).
        kept_steps: step groups that stay exact.
        folded_steps: step groups folded.
        folded_bytes: weight of the folded entries.
    """

    folded: tuple[str, ...]
    kept_steps: int
    folded_steps: int
    folded_bytes: int


def _groups(units: Sequence[Unit]) -> list[list[int]]:
    """Return groups of unit indices in order of first appearance (checkpoints excluded)."""
    by_key: dict[str, int] = {}
    by_call: dict[str, int] = {}
    groups: list[list[int]] = []
    kinds: list[str] = []
    for i, unit in enumerate(units):
        if unit.kind == CHECKPOINT:
            continue
        g: int | None = None
        if unit.kind == STEP:
            if unit.is_result and unit.call_id in by_call:
                g = by_call[unit.call_id]
            elif unit.group in by_key:
                g = by_key[unit.group]
        if g is None:
            g = len(groups)
            groups.append([])
            kinds.append(unit.kind)
            if unit.kind == STEP:
                by_key.setdefault(unit.group, g)
        groups[g].append(i)
        if unit.kind == STEP and unit.call_id and not unit.is_result:
            by_call[unit.call_id] = g
    return groups


def step_groups(units: Sequence[Unit]) -> int:
    """Return how many model steps the view holds (what the turn trigger counts)."""
    return sum(1 for g in _groups(units) if units[g[0]].kind == STEP)


def plan(units: Sequence[Unit], keep_turns: int = DEFAULT_KEEP_TURNS) -> Plan | None:
    """Plan a pass over the context view (see the module docstring).

    Args:
        units: the view in order.
        keep_turns: step groups to keep exact (>= 1; 0 or less means DEFAULT_KEEP_TURNS).

    Returns:
        The plan, or None when there is nothing to fold (no step group older than the
        kept ones, and no checkpoint to merge with something new).
    """
    keep = keep_turns if keep_turns > 0 else DEFAULT_KEEP_TURNS
    groups = _groups(units)
    steps = [gi for gi, g in enumerate(groups) if units[g[0]].kind == STEP]
    if len(steps) <= keep:
        return None
    cut = steps[len(steps) - keep]  # the first kept step group
    pinned = next((gi for gi in range(cut - 1, -1, -1) if units[groups[gi][0]].kind == USER), None)
    fold_groups = [gi for gi in range(cut) if gi != pinned]
    folded_idx = sorted(
        [i for gi in fold_groups for i in groups[gi]]
        + [i for i, u in enumerate(units) if u.kind == CHECKPOINT]
    )
    folded_steps = sum(1 for gi in fold_groups if units[groups[gi][0]].kind == STEP)
    if not folded_steps:
        return None
    return Plan(
        folded=tuple(units[i].entry_id for i in folded_idx),
        kept_steps=keep,
        folded_steps=folded_steps,
        folded_bytes=sum(units[i].size_bytes for i in folded_idx),
    )


def weight(units: Sequence[Unit]) -> int:
    """Return the context's weight: the summed bytes of its entries' bodies."""
    return sum(u.size_bytes for u in units)


def trigger_tokens(window_tokens: int, trigger: int) -> int:
    """Return the token threshold of a policy (0 = no token trigger)."""
    if trigger > 0:
        return trigger
    if window_tokens > 0:
        return int(window_tokens * DEFAULT_TRIGGER_SHARE)
    return 0


def should_compact(
    estimate_tokens: int, threshold_tokens: int, steps: int, trigger_turns: int
) -> tuple[bool, str]:
    """Decide whether a pass is due; returns (due, why) with why "tokens", "turns" or "".

    Args:
        estimate_tokens: the next request's estimated input, in tokens.
        threshold_tokens: the token trigger (0 = off); a request exactly at it fits.
        steps: step groups in the view.
        trigger_turns: the turn trigger (0 = off): due when steps exceed it.
    """
    if threshold_tokens > 0 and estimate_tokens > threshold_tokens:
        return True, "tokens"
    if trigger_turns > 0 and steps > trigger_turns:
        return True, "turns"
    return False, ""


def estimate_tokens(last_input_tokens: int, last_output_tokens: int, bytes_since: int) -> int:
    """Estimate the next request's input: the last one's input and output, plus what was added."""
    return last_input_tokens + last_output_tokens + (bytes_since + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def evidence(records: Sequence[dict[str, object]], previous: Sequence[str], budget_bytes: int) -> str:
    """Return the summary request's user message: earlier summaries, then the records.

    Args:
        records: the folded entries as JSON-able objects in order (role, text, calls,
            results...); string values are capped so the whole fits budget_bytes.
        previous: summaries of the checkpoints being merged, oldest first.
        budget_bytes: bound on the message, in bytes (>= 1,024).
    """
    budget = max(budget_bytes, 1024)
    head = EVIDENCE_HEADER
    if previous:
        head = "Summary written before:\n" + "\n\n".join(previous) + "\n\n" + head
    head = truncate(head, budget // 3)
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    room = budget - byte_len(head) - len(lines) - 1
    total = sum(byte_len(line) for line in lines)
    if total > room and lines:
        # Cap every string field evenly: each record keeps its shape, the longest bodies shrink.
        cap = max(64, room // len(lines) - 96)
        lines = [json.dumps(_capped(r, cap), ensure_ascii=False, separators=(",", ":")) for r in records]
        kept: list[str] = []
        used = 0
        for line in reversed(lines):  # the newest records matter most; the oldest go first
            if used + byte_len(line) + 1 > room:
                break
            kept.append(line)
            used += byte_len(line) + 1
        dropped = len(lines) - len(kept)
        lines = list(reversed(kept))
        if dropped:
            lines.insert(0, json.dumps({"note": f"{dropped} older record(s) did not fit and are omitted"}))
    return head + "\n" + "\n".join(lines)


def _capped(record: dict[str, object], cap: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in record.items():
        if isinstance(value, str):
            out[key] = truncate(value, cap)
        elif isinstance(value, list):
            out[key] = [_capped(v, cap) if isinstance(v, dict) else v for v in value]
        elif isinstance(value, dict):
            out[key] = _capped(value, cap)
        else:
            out[key] = value
    return out
