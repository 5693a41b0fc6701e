"""A run row's column encoding: a `RunRecord` field to its column and back.

`encode()` maps a record field and value to its column, so the store writes a change given
in record terms; `decode()` / `decode_mapping()` read a runs-table row into a `RunRecord`
(runs/domain.py; see models.RunRow for each field's meaning); `COLUMNS` are the record's
fields in the table's order.
"""

from __future__ import annotations

import json
from typing import Any

from agentrt.runs.domain import Answers, RunRecord
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


def encode(name: str, value: Any) -> tuple[str, Any]:
    """Map a RunRecord field and value to its column and stored value."""
    if name in ("usage",):
        return name, value.SerializeToString()
    if name in ("failure",):
        return name, value.SerializeToString() if value is not None else None
    if name == "pending":
        return name, pb.RunSuspended(pending_calls=value).SerializeToString() if value else None
    if name == "answers":
        return name, value.to_bytes() if value else None
    if name == "agent":
        return name, value.SerializeToString()
    if name in ("always_approved", "pending_input", "labels", "state"):
        return f"{name}_json", json.dumps(value)
    if isinstance(value, str) and "\x00" in value:
        # PostgreSQL text cannot hold U+0000: a model answer or input holding one is stored
        # with U+FFFD in its place, on every backend alike (JSON columns escape it instead).
        return name, value.replace("\x00", "\ufffd")
    return name, value


def decode(row: Any) -> RunRecord:
    """Return the RunRecord of a runs-table row (a SQLAlchemy Row)."""
    return decode_mapping(row._mapping)


def decode_mapping(m: Any) -> RunRecord:
    """Return the RunRecord of a runs-table row given as a mapping of column -> value.

    Takes anything indexed by column name: a SQLAlchemy row mapping, an asyncpg Record,
    a dict (the SQLite driver's tuple zipped with its columns, runs/storage/lite.py).
    """
    failure = cpb.FailureInfo.FromString(m["failure"]) if m["failure"] else None
    pending = list(pb.RunSuspended.FromString(m["pending"]).pending_calls) if m["pending"] else []
    answers = Answers.from_bytes(m["answers"])
    return RunRecord(
        run_id=m["run_id"],
        tenant=m["tenant"],
        session_id=m["session_id"],
        agent_name=m["agent_name"],
        agent_version=m["agent_version"],
        agent=pb.AgentSpec.FromString(m["agent"]),
        input=m["input"],
        workspace=m["workspace"],
        labels=json.loads(m["labels_json"] or "{}"),
        idempotency_key=m["idempotency_key"],
        status=m["status"],
        phase=m["phase"],
        turns=m["turns"],
        usage=cpb.Usage.FromString(m["usage"] or b""),
        final_output=m["final_output"],
        failure=failure,
        pending=pending,
        answers=answers,
        always_approved=json.loads(m["always_approved_json"] or "[]"),
        pending_input=json.loads(m["pending_input_json"] or "[]"),
        session_last_seq=m["session_last_seq"],
        consecutive_error_turns=m["consecutive_error_turns"],
        tool_calls=m["tool_calls"],
        cancel_requested=bool(m["cancel_requested"]),
        cancel_reason=m["cancel_reason"],
        lease_owner=m["lease_owner"],
        lease_expires_s=m["lease_expires_s"],
        fencing_token=m["fencing_token"],
        create_time_s=m["create_time_s"],
        update_time_s=m["update_time_s"],
        event_seq_reserved=m["event_seq_reserved"],
        session_seq_reserved=m["session_seq_reserved"],
        deadline_s=m["deadline_s"],
        state=json.loads(m["state_json"] or "{}"),
    )


COLUMNS = [
    "run_id", "tenant", "session_id", "agent_name", "agent_version", "agent", "input", "workspace", "labels",
    "idempotency_key", "status", "phase", "turns", "usage", "final_output", "failure", "pending", "answers",
    "always_approved", "pending_input", "session_last_seq", "consecutive_error_turns", "tool_calls",
    "cancel_requested", "cancel_reason", "lease_owner", "lease_expires_s", "fencing_token", "create_time_s",
    "update_time_s", "event_seq_reserved", "session_seq_reserved", "deadline_s", "state",
]  # fmt: skip
