"""Run domain values apart from the generated request messages (issue 11 "Shape").

The servicer maps a request to one of these and the manager, the record and the loop work
on them; nothing past the servicer holds a raw `*Request`:

- `Answers`: the answers to a suspended run's calls, keyed by call id (approval
  decisions, client results, reconciliations). One ResumeRun brings some; the record
  accumulates them until every pending call is answered; the save point clears them.
  Stored as the bytes of the message with the same three lists (the `answers` column
  keeps its encoding, so rows written before this type read back unchanged).
- `Resume`: one ResumeRun's content (which run, and the answers it brings, in request
  order so an error can name the request index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
