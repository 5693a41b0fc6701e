"""Typed errors of the Python client: the status code and the contract's ErrorReason.

`AgentrtError` is what `AgentrtClient` raises for every failed call: the grpc.StatusCode, the
ErrorInfo reason (domain "agentrt.dev") as a value of the generated enum
`agentrt.v1.ErrorReason` (docs/errors.md), its metadata and the RetryInfo delay. A reason
newer than these contracts reads as ERROR_REASON_UNSPECIFIED, its text kept in `reason_name`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from agentrt.mesh.status import CONTRACT_REASONS, details_of
from agentrt.v1 import error_reason_pb2


@dataclass
class AgentrtError(Exception):
    """A refused or failed call.

    Attributes:
        code: the gRPC status code.
        reason: the agentrt.v1.ErrorReason value (an int; `ErrorReason.Name(reason)` names
            it); ERROR_REASON_UNSPECIFIED when the error carried no reason or a newer one.
        reason_name: the reason exactly as sent, e.g. "RUN_NOT_FOUND"; "" when none.
        message: the status message (user-safe).
        metadata: ErrorInfo metadata, e.g. {"field": "run_id"}.
        retry_after_seconds: the RetryInfo delay, when the server gave one.
    """

    code: grpc.StatusCode
    reason: int
    reason_name: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)
    retry_after_seconds: float | None = None

    def __str__(self) -> str:
        tag = f" {self.reason_name}" if self.reason_name else ""
        return f"{self.code.name}{tag}: {self.message}"


def to_agentrt_error(error: grpc.RpcError) -> AgentrtError:
    """Build the AgentrtError of a failed grpc.aio call (status, reason, metadata, retry)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    text = error.details() if hasattr(error, "details") else str(error)
    name, metadata, retry = details_of(error)
    value = error_reason_pb2.ErrorReason.Value(name) if name in CONTRACT_REASONS else 0
    return AgentrtError(code, value, name, text or "", metadata, retry)
