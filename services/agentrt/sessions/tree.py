"""Pure reads over a session's log (004 §2.5b, §2.5c, §2.5d, §2.5f, §2.5h).

The active leaf, branch walks, the context view, the update fold, and dangling tool calls.

Every function takes the log as a sequence of `Entry` in seq order and returns new values;
nothing here touches storage, and nothing here mutates its input (entries are frozen), so
a fold can never change what the next read returns.

The tree (004 §2.5d):
- storage links each appended entry to the current leaf (`link`), so every entry but a
  leaf move extends the branch it was written on;
- a leaf move ("leaf" entry) makes its `leaf_entry_id` the current leaf; it is recorded
  as a child of the leaf it moved away from but is never on a branch itself;
- the current leaf is therefore a fold that depends on the last entry alone;
- a walk follows parent links back from the leaf; a missing parent or a repeated id ends
  it, and a walk that reaches a root inside the log's linkless prefix continues through
  that prefix.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence

from agentrt.sessions.domain import (
    COMPACTION,
    ITEM_TOOL_CALL,
    ITEM_TOOL_RESULT,
    LEAF,
    PROJECTED_KINDS,
    STRUCTURAL_KINDS,
    UPDATE,
    Display,
    Entry,
)


def leaf_after(last: Entry | None) -> str:
    """Return the current leaf given the log's last entry ("" for an empty log)."""
    if last is None:
        return ""
    return last.leaf_entry_id if last.kind == LEAF else last.entry_id


def current_leaf(log: Sequence[Entry]) -> str:
    """Return the active leaf of a log in seq order ("" when empty)."""
    return leaf_after(log[-1] if log else None)


def link(leaf: str, batch: Iterable[Entry]) -> tuple[list[Entry], str]:
    """Assign parent ids to a batch appended after `leaf` (storage's job, 004 §2.5d).

    Args:
        leaf: the active leaf before the batch ("" for an empty log).
        batch: entries with ids already minted, in append order.

    Returns:
        (the entries with `parent_id` set, the active leaf after them).
    """
    out: list[Entry] = []
    for entry in batch:
        out.append(dataclasses.replace(entry, parent_id=leaf))
        leaf = entry.leaf_entry_id if entry.kind == LEAF else entry.entry_id
    return out, leaf


def _linkless_prefix(log: Sequence[Entry]) -> list[Entry]:
    prefix: list[Entry] = []
    for entry in log:
        if entry.parent_id or entry.kind == LEAF:
            break
        prefix.append(entry)
    return prefix


def branch(log: Sequence[Entry], leaf: str | None = None) -> list[Entry]:
    """Return the branch ending at `leaf` (default: the active leaf), root first.

    Leaf moves are never on a branch; every other kind is (a walk does not stop at a
    compaction checkpoint: which entries the model sees is projection's question).

    Args:
        log: the whole log of one session incarnation, in seq order.
        leaf: the entry id to walk back from; None means the active leaf.
    """
    by_id = {e.entry_id: e for e in log if e.kind != LEAF}
    cur = current_leaf(log) if leaf is None else leaf
    path: list[Entry] = []
    seen: set[str] = set()
    while cur and cur in by_id and cur not in seen:
        entry = by_id[cur]
        seen.add(cur)
        path.append(entry)
        cur = entry.parent_id
    path.reverse()
    if path and not path[0].parent_id:
        prefix = _linkless_prefix(log)
        if any(e.entry_id == path[0].entry_id for e in prefix):
            ahead = [e for e in prefix if e.seq < path[0].seq and e.entry_id not in seen]
            path = ahead + path
    return path


def folded_ids(entries: Iterable[Entry]) -> set[str]:
    """Return the ids the compaction checkpoints among entries fold."""
    out: set[str] = set()
    for entry in entries:
        if entry.kind == COMPACTION:
            out.update(entry.folded_entry_ids)
    return out


def _merge_extra(base: str, update: str) -> str:
    if not update:
        return base
    if not base:
        return update
    try:
        merged = json.loads(base)
        patch = json.loads(update)
    except ValueError:
        return update
    if not isinstance(merged, dict) or not isinstance(patch, dict):
        return update
    merged.update(patch)
    return json.dumps(merged, separators=(",", ":"))


def _apply(display: Display | None, update: Display) -> Display:
    base = display or Display()
    return Display(
        title=update.title or base.title,
        summary=update.summary or base.summary,
        extra_json=_merge_extra(base.extra_json, update.extra_json),
    )


def fold_updates(view: Sequence[Entry], log: Sequence[Entry]) -> list[Entry]:
    """Fold the log's update entries into the displays of the view's entries (004 §2.5b).

    Updates apply in seq order and the last write wins per display field (`extra_json`
    objects merge key by key). An update targets an entry by id, or a tool call entry by
    call id; it may precede its target; a missing target is ignored. Updates on every
    branch apply, so a late card lands wherever its target is shown.

    Returns:
        New entries (the input is untouched), in the view's order.
    """
    updates = [e for e in log if e.kind == UPDATE and e.display is not None]
    if not updates:
        return list(view)
    out = list(view)
    by_id = {e.entry_id: i for i, e in enumerate(out)}
    by_call: dict[str, list[int]] = {}
    for i, e in enumerate(out):
        if e.item_type == ITEM_TOOL_CALL and e.call_id:
            by_call.setdefault(e.call_id, []).append(i)
    for upd in updates:
        assert upd.display is not None
        if upd.target_entry_id:
            targets = [by_id[upd.target_entry_id]] if upd.target_entry_id in by_id else []
        else:
            targets = by_call.get(upd.target_call_id, [])
        for i in targets:
            out[i] = dataclasses.replace(out[i], display=_apply(out[i].display, upd.display))
    return out


def context_view(log: Sequence[Entry], *, include_unprojected: bool = False) -> list[Entry]:
    """Return the context view (004 §2.5c ContextEntries).

    That is the active branch minus what its checkpoints fold, updates folded in,
    projected kinds only.

    Args:
        log: the whole log in seq order.
        include_unprojected: also keep kinds that do not project by default (annotations,
            terminal output, custom and unknown kinds). Leaf moves and updates are never in
            the view: they are folded into it.

    Returns:
        Entries in branch order (which is seq order), checkpoints kept.
    """
    path = branch(log)
    hidden = folded_ids(path)
    view = [
        e
        for e in path
        if e.kind not in STRUCTURAL_KINDS
        and e.entry_id not in hidden
        and (include_unprojected or e.kind in PROJECTED_KINDS)
    ]
    return fold_updates(view, log)


def dangling_calls(path: Sequence[Entry]) -> list[Entry]:
    """Return the tool call entries on a branch with no tool result on it (004 §2.5h).

    Args:
        path: a branch, root first (see `branch`).

    Returns:
        The unanswered call entries in branch order, one per call id.
    """
    answered = {e.call_id for e in path if e.item_type == ITEM_TOOL_RESULT}
    out: list[Entry] = []
    seen: set[str] = set()
    for entry in path:
        if entry.item_type == ITEM_TOOL_CALL and entry.call_id not in answered and entry.call_id not in seen:
            seen.add(entry.call_id)
            out.append(entry)
    return out


def page(entries: Sequence[Entry], after_seq: int, limit: int) -> list[Entry]:
    """Apply a seq cursor to entries in seq order (004 §2.5c).

    Args:
        entries: entries in seq order.
        after_seq: keep entries with seq greater than this.
        limit: positive = the first N after the cursor, negative = the most recent N (in
            seq order), 0 = all.
    """
    rest = [e for e in entries if e.seq > after_seq]
    if limit > 0:
        return rest[:limit]
    if limit < 0:
        return rest[limit:]
    return rest
