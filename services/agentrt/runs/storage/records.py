"""Decoded run rows and events as the store hands them out, and their column encoding.

`RunRecord` is the run row with protobuf fields decoded and JSON fields parsed;
`encode()` maps a record field and value back to its column, so the store writes a
change given in record terms (see models.RunRow for each field's meaning).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentrt.runs.domain import Answers
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


@dataclass
class StoredEvent:
    """An event with its place in the run's and the session's timelines."""

    run_id: str
    seq: int
    tenant: str
    session_id: str
    session_seq: int
    event: pb.RunEvent


@dataclass
class RunRecord:
    """A decoded run row (see models.RunRow for the meaning of each field)."""

    run_id: str
    tenant: str
    session_id: str
    agent_name: str
    agent_version: int
    agent: pb.AgentSpec
    input: str
    workspace: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    status: int = cpb.RUN_STATUS_RUNNING
    phase: int = cpb.RUN_PHASE_PROMPTED
    turns: int = 0
    usage: cpb.Usage = field(default_factory=cpb.Usage)
    final_output: str = ""
    failure: cpb.FailureInfo | None = None
    pending: list[pb.PendingCall] = field(default_factory=list)
    answers: Answers = field(default_factory=Answers)
    always_approved: list[str] = field(default_factory=list)
    pending_input: list[dict[str, Any]] = field(default_factory=list)
    session_last_seq: int = 0
    consecutive_error_turns: int = 0
    tool_calls: int = 0
    cancel_requested: bool = False
    cancel_reason: str = ""
    lease_owner: str = ""
    lease_expires_s: float = 0.0
    fencing_token: int = 0
    create_time_s: float = 0.0
    update_time_s: float = 0.0
    event_seq_reserved: int = 0
    session_seq_reserved: int = 0
    deadline_s: float = 0.0
    #: Small state read with the row: "overflow_retries" (int), "attempts" ({call_id: n},
    #: re-runs a reconciliation ordered), "suspension_reason" (a SuspensionReason number),
    #: "diagnostics" (list of Diagnostic JSON objects, oldest first, at most MAX_DIAGNOSTICS).
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """True in a terminal status."""
        return self.status in TERMINAL

    @property
    def overflow_retries(self) -> int:
        """Context overflows recovered so far (004 §2.5g)."""
        return int(self.state.get("overflow_retries", 0))

    @property
    def suspension_reason(self) -> int:
        """Why the run is suspended (a SuspensionReason number; 0 when it is not)."""
        return int(self.state.get("suspension_reason", 0))

    def attempt_of(self, call_id: str) -> int:
        """The execution attempt a call is on (0 = the first; see ExecuteToolRequest.attempt)."""
        return int(self.state.get("attempts", {}).get(call_id, 0))

    def diagnostics(self) -> list[pb.Diagnostic]:
        """The diagnostics recorded so far, oldest first."""
        return [diagnostic_in(d) for d in self.state.get("diagnostics", [])]

    def with_state(self, **values: Any) -> dict[str, Any]:
        """Return a copy of `state` with values set (for a `save(changes={"state": ...})`)."""
        return {**self.state, **values}


#: Diagnostics kept on the run row (the newest win; events and session entries keep all).
MAX_DIAGNOSTICS = 100


def diagnostic_out(d: pb.Diagnostic) -> dict[str, Any]:
    """Return the JSON object of a diagnostic as `state["diagnostics"]` keeps it."""
    return {"code": d.code, "message": d.message, "turn": d.turn, "details_json": d.details_json}


def diagnostic_in(d: dict[str, Any]) -> pb.Diagnostic:
    """Return the Diagnostic of a `state["diagnostics"]` JSON object."""
    return pb.Diagnostic(
        code=str(d.get("code", "")),
        message=str(d.get("message", "")),
        turn=int(d.get("turn", 0)),
        details_json=str(d.get("details_json", "")),
    )


TERMINAL = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)


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
    a dict (the SQLite driver's tuple zipped with its columns, runs/store_lite.py).
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
