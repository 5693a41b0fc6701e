"""The run loop's domain values: a run's record, its stored events, the answers it waits for.

The store hands these out and takes them back (runs/storage/records.py maps a record to and
from its row's columns); the manager, the lifecycle and the loop work on them; the servicer
maps requests to them (issue 11 "Shape": nothing past the servicer holds a raw `*Request`).

- `RunRecord`: a run row decoded (see storage/models.RunRow for each field's meaning), with
  its small `state` read as JSON; `TERMINAL` its final statuses; `diagnostic_out` /
  `diagnostic_in` the JSON form of the diagnostics `state` keeps (at most MAX_DIAGNOSTICS).
- `StoredEvent`: an event with its place in the run's and the session's timelines.
- `Answers`: the answers to a suspended run's calls, keyed by call id (approval
  decisions, client results, reconciliations). One ResumeRun brings some; the record
  accumulates them until every pending call is answered; the save point clears them.
  Stored as the bytes of the message with the same three lists (the `answers` column
  keeps its encoding, so rows written before this type read back unchanged).
- `Resume`: one ResumeRun's content (which run, and the answers it brings, in request
  order so an error can name the request index).

The fields the contracts define and the run keeps as they are (the agent snapshot, usage,
the failure, the pending calls, the answers themselves) stay the contracts' messages:
they are stored as those messages' bytes and returned in a Run unchanged
(docs/decisions/0042-runs-rooms.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb


@dataclass
class Answers:
    """Answers received for a run's pending calls, by call id (insertion order kept)."""

    decisions: dict[str, pb.ApprovalDecision] = field(default_factory=dict)
    results: dict[str, cpb.ToolResult] = field(default_factory=dict)
    reconciliations: dict[str, pb.Reconciliation] = field(default_factory=dict)

    def answered(self) -> set[str]:
        """Return the call ids answered so far (any kind)."""
        return set(self.decisions) | set(self.results) | set(self.reconciliations)

    def __bool__(self) -> bool:
        """True when anything is answered."""
        return bool(self.decisions or self.results or self.reconciliations)

    def copy(self) -> Answers:
        """Return a shallow copy (the messages are not mutated once received)."""
        return Answers(dict(self.decisions), dict(self.results), dict(self.reconciliations))

    def to_bytes(self) -> bytes:
        """Return the stored form (empty bytes when nothing is answered)."""
        msg = pb.ResumeRunRequest(
            decisions=list(self.decisions.values()),
            results=list(self.results.values()),
            reconciliations=list(self.reconciliations.values()),
        )
        return msg.SerializeToString()

    @classmethod
    def from_bytes(cls, data: bytes | None) -> Answers:
        """Return the answers of a stored form (None or b"" = none)."""
        if not data:
            return cls()
        msg = pb.ResumeRunRequest.FromString(data)
        return cls(
            {d.call_id: d for d in msg.decisions},
            {r.call_id: r for r in msg.results},
            {c.call_id: c for c in msg.reconciliations},
        )


@dataclass
class Resume:
    """One ResumeRun: the run and the answers it brings, in request order."""

    run_id: str
    decisions: list[pb.ApprovalDecision] = field(default_factory=list)
    results: list[cpb.ToolResult] = field(default_factory=list)
    reconciliations: list[pb.Reconciliation] = field(default_factory=list)

    @classmethod
    def of(cls, req: pb.ResumeRunRequest) -> Resume:
        """Map the request (the servicer's one proto -> domain step for ResumeRun)."""
        return cls(req.run_id, list(req.decisions), list(req.results), list(req.reconciliations))


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
