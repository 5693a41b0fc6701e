"""The run loop's side of writing a turn to the session store (004 §2.5, §2.7f).

Pure functions over `agentrt.v1.Entry` messages; no I/O. The run loop builds the entries
of a turn, asks `safe_persist_boundary` what may be written now, sends `persist` in one
AppendEntries call, and keeps `held` in its run state until the outputs exist.

Invariant kept (safePersistBoundary): the stored conversation never holds a tool call
without its output. A call whose output is not yet known (pending approval, an external
tool, a call still running) is held back and written later together with its output.
Usage (004 §2.7f) sits on exactly one entry per model response, its last one written:
`attach_usage` puts it there, and when a boundary holds back the entry that carried it,
the usage moves to the last entry of that response written now ("attribute on the first
batch and clear the flag"), so a response split across two batches is counted once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb


@dataclass
class PersistBoundary:
    """What may be written now and what must wait.

    Attributes:
        persist: entries to append now, in their original order.
        held: tool call entries whose outputs are missing, in their original order.
    """

    persist: list[pb.Entry] = field(default_factory=list)
    held: list[pb.Entry] = field(default_factory=list)


def _is_call(entry: pb.Entry) -> bool:
    return entry.kind == "item" and entry.item.HasField("tool_call")


def _is_result(entry: pb.Entry) -> bool:
    return entry.kind == "item" and entry.item.HasField("tool_result")


def safe_persist_boundary(entries: Sequence[pb.Entry], answered: Iterable[str] = ()) -> PersistBoundary:
    """Split a turn's entries into those safe to persist now and the calls to hold back (004 §2.5).

    A tool call is safe when its output (a tool_result item with the same call_id) is
    among `entries` or its call id is in `answered` (outputs already stored). Every
    other entry is always safe: messages, results, and non-item kinds.

    Args:
        entries: the turn's entries in order (kind "item" entries carry the items).
        answered: call ids whose outputs were persisted earlier.

    Returns:
        The boundary. Inputs are never modified; entries whose usage moved are copies.
    """
    done = set(answered) | {e.item.tool_result.call_id for e in entries if _is_result(e)}
    boundary = PersistBoundary()
    for entry in entries:
        if _is_call(entry) and entry.item.tool_call.call_id not in done:
            boundary.held.append(entry)
        else:
            boundary.persist.append(entry)
    if boundary.held:
        _move_usage(boundary)
    return boundary


def _move_usage(boundary: PersistBoundary) -> None:
    """Re-home usage carried by held entries onto the last persisted entry of their response."""
    for i, held in enumerate(boundary.held):
        if not held.HasField("usage"):
            continue
        idx = [j for j, e in enumerate(boundary.persist) if e.response_id == held.response_id]
        if not idx:
            continue  # nothing of this response is written now: the usage travels with the held call
        target = pb.Entry()
        target.CopyFrom(boundary.persist[idx[-1]])
        target.usage.CopyFrom(held.usage)
        boundary.persist[idx[-1]] = target
        stripped = pb.Entry()
        stripped.CopyFrom(held)
        stripped.ClearField("usage")
        boundary.held[i] = stripped


def attach_usage(entries: Sequence[pb.Entry], response_id: str, usage: cpb.Usage) -> list[pb.Entry]:
    """Return copies of entries with `usage` on the last entry of `response_id` only (004 §2.7f).

    Entries of the response are those whose `response_id` equals it. With an empty
    response id (a backend that returns none) every entry counts as the response's, so
    pass that response's entries only; the usage lands on the last. Any usage the
    response's other entries carried is cleared.

    Args:
        entries: the entries of one model response (and, with a response id, possibly
            others), in order.
        response_id: the response the usage belongs to ("" when the backend gave none).
        usage: that response's usage.

    Returns:
        New entries in the same order; the input is untouched.
    """
    out = []
    for entry in entries:
        copy = pb.Entry()
        copy.CopyFrom(entry)
        out.append(copy)
    mine = (
        [i for i, e in enumerate(out) if e.response_id == response_id]
        if response_id
        else list(range(len(out)))
    )
    for i in mine:
        out[i].ClearField("usage")
    if mine:
        out[mine[-1]].usage.CopyFrom(usage)
    return out
