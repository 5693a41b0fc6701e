"""Conversion between database rows and the domain values of the session store.

Owns the storage encoding of the fields that are not plain columns: display, usage and
folded ids as compact JSON, metadata as a JSON object. Nothing else in the service knows
how a value is laid out in a row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentrt.sessions.domain import Display, Entry, SessionInfo, Usage


def entry_values(tenant: str, session_id: str, generation: int, entry: Entry) -> dict[str, Any]:
    """Return the column values of `session_entries` for a stored (seq-assigned) entry."""
    display = entry.display
    return {
        "tenant": tenant,
        "session_id": session_id,
        "generation": generation,
        "seq": entry.seq,
        "entry_id": entry.entry_id,
        "parent_id": entry.parent_id,
        "kind": entry.kind,
        "item": entry.item,
        "item_type": entry.item_type,
        "call_id": entry.call_id,
        "tool_name": entry.tool_name,
        "payload_json": entry.payload_json or None,
        "display_json": (
            json.dumps([display.title, display.summary, display.extra_json]) if display is not None else None
        ),
        "run_id": entry.run_id,
        "turn": entry.turn,
        "response_id": entry.response_id,
        "usage_json": entry.usage.to_json() if entry.usage is not None else None,
        "nested_usage_json": entry.nested_usage.to_json() if entry.nested_usage is not None else None,
        "target_entry_id": entry.target_entry_id,
        "target_call_id": entry.target_call_id,
        "folded_ids_json": json.dumps(list(entry.folded_entry_ids)) if entry.folded_entry_ids else None,
        "summary": entry.summary or None,
        "leaf_entry_id": entry.leaf_entry_id,
        "create_time_us": entry.create_time_us,
    }


def entry_from_row(row: Mapping[Any, Any]) -> Entry:
    """Return the domain entry of a `session_entries` row (mapping of column values)."""
    display = None
    if row["display_json"]:
        title, summary, extra = json.loads(row["display_json"])
        display = Display(title=title, summary=summary, extra_json=extra)
    item = row["item"]
    return Entry(
        kind=row["kind"],
        entry_id=row["entry_id"],
        seq=row["seq"],
        parent_id=row["parent_id"],
        item=bytes(item) if item is not None else None,
        item_type=row["item_type"],
        call_id=row["call_id"],
        tool_name=row["tool_name"],
        payload_json=row["payload_json"] or "",
        display=display,
        run_id=row["run_id"],
        turn=row["turn"],
        response_id=row["response_id"],
        usage=Usage.from_json(row["usage_json"]),
        nested_usage=Usage.from_json(row["nested_usage_json"]),
        target_entry_id=row["target_entry_id"],
        target_call_id=row["target_call_id"],
        folded_entry_ids=tuple(json.loads(row["folded_ids_json"])) if row["folded_ids_json"] else (),
        summary=row["summary"] or "",
        leaf_entry_id=row["leaf_entry_id"],
        create_time_us=row["create_time_us"],
    )


#: The columns of `session_entries` a driver-SQL read selects, in the order
#: `entry_from_tuple` reads them.
ENTRY_COLUMNS = (
    "kind",
    "entry_id",
    "seq",
    "parent_id",
    "item",
    "item_type",
    "call_id",
    "tool_name",
    "payload_json",
    "display_json",
    "run_id",
    "turn",
    "response_id",
    "usage_json",
    "nested_usage_json",
    "target_entry_id",
    "target_call_id",
    "folded_ids_json",
    "summary",
    "leaf_entry_id",
    "create_time_us",
)


def entry_from_tuple(row: Sequence[Any]) -> Entry:
    """Return the domain entry of a row holding `ENTRY_COLUMNS` in order (see `entry_from_row`)."""
    (
        kind,
        entry_id,
        seq,
        parent_id,
        item,
        item_type,
        call_id,
        tool_name,
        payload_json,
        display_json,
        run_id,
        turn,
        response_id,
        usage_json,
        nested_usage_json,
        target_entry_id,
        target_call_id,
        folded_ids_json,
        summary,
        leaf_entry_id,
        create_time_us,
    ) = row
    display = None
    if display_json:
        title, summary_text, extra = json.loads(display_json)
        display = Display(title=title, summary=summary_text, extra_json=extra)
    return Entry(
        kind=kind,
        entry_id=entry_id,
        seq=seq,
        parent_id=parent_id,
        item=bytes(item) if item is not None else None,
        item_type=item_type,
        call_id=call_id,
        tool_name=tool_name,
        payload_json=payload_json or "",
        display=display,
        run_id=run_id,
        turn=turn,
        response_id=response_id,
        usage=Usage.from_json(usage_json),
        nested_usage=Usage.from_json(nested_usage_json),
        target_entry_id=target_entry_id,
        target_call_id=target_call_id,
        folded_entry_ids=tuple(json.loads(folded_ids_json)) if folded_ids_json else (),
        summary=summary or "",
        leaf_entry_id=leaf_entry_id,
        create_time_us=create_time_us,
    )


def session_from_row(row: Mapping[Any, Any], last_seq: int = 0, entry_count: int = 0) -> SessionInfo:
    """Return the domain session of a `sessions` row plus its log folds."""
    return SessionInfo(
        session_id=row["session_id"],
        generation=row["generation"],
        hidden=bool(row["hidden"]),
        parent_session_id=row["parent_session_id"],
        parent_generation=row["parent_generation"],
        title=row["title"],
        metadata=json.loads(row["metadata_json"] or "{}"),
        create_time_us=row["create_time_us"],
        update_time_us=row["update_time_us"],
        last_seq=last_seq or 0,
        entry_count=entry_count or 0,
    )
