"""The outcome of one tool call, as the domain knows it (004 §2.7b).

`Outcome.content` is what the model sees; `summary` and `details` never reach it.
`Outcome` round-trips through JSON (`to_json`/`from_json`), which is how the execution
journal stores it; the servicer maps it to the proto `ToolResult`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any


class ResultStatus(enum.StrEnum):
    """How a call ended; mirrors the proto's ToolResultStatus."""

    OK = "ok"
    ERROR = "error"
    NOT_EXECUTED = "not_executed"
    INTERRUPTED = "interrupted"
    DENIED = "denied"
    TIMED_OUT = "timed_out"


@dataclass
class Outcome:
    """One call's result.

    Attributes:
        content: model-facing UTF-8 text.
        is_error: True when content reports a failure the model may correct.
        status: how the call ended.
        summary: one line for displays.
        details: host-only facts (JSON-serializable values only).
        exit_code: the command's exit status, when one ran (0 otherwise).
        output_truncated: True when output was cut to the cap.
        duration_seconds: wall time the tool took, seconds.
    """

    content: str
    is_error: bool = False
    status: ResultStatus = ResultStatus.OK
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0
    output_truncated: bool = False
    duration_seconds: float = 0.0

    def to_json(self) -> str:
        """Serialize for the journal."""
        # The fields in declaration order, as dataclasses.asdict gave them (without its deep copy).
        data = {
            "content": self.content,
            "is_error": self.is_error,
            "status": str(self.status),
            "summary": self.summary,
            "details": self.details,
            "exit_code": self.exit_code,
            "output_truncated": self.output_truncated,
            "duration_seconds": self.duration_seconds,
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        """Read back what `to_json` wrote."""
        data = json.loads(text)
        data["status"] = ResultStatus(data["status"])
        return cls(**data)


def refused(message: str, reason: str, **details: Any) -> Outcome:
    """Return an is_error result for a call the tool will not run as given.

    Bad arguments or a path outside the workspace: the model reads why and may correct it (004 §2.7l).
    """
    return Outcome(
        content=message,
        is_error=True,
        status=ResultStatus.ERROR,
        summary=message.split("\n", 1)[0],
        details={"reason": reason, **details},
    )


def interrupted(why: str, reason: str) -> Outcome:
    """The result recorded for a call whose outcome is unknown (seed 000 interruption)."""
    return Outcome(
        content=f"The call was interrupted ({why}); its outcome is unknown. It may have partly run.",
        is_error=True,
        status=ResultStatus.INTERRUPTED,
        summary=f"interrupted: {why}",
        details={"reason": reason},
    )


def not_executed(why: str) -> Outcome:
    """The result recorded for a call cancelled before it started (CancelExecution): it never ran."""
    outcome = refused(f"The call was not executed: {why} before it started.", "CANCELLED")
    outcome.status = ResultStatus.NOT_EXECUTED
    return outcome
