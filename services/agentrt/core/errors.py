"""Stable error reasons and the domain error every layer raises (seed 004 §2.10).

A `MeshError` carries a gRPC-independent status name and a stable reason; the mesh's
error interceptor turns it into a gRPC status with a google.rpc.ErrorInfo detail (and a
RetryInfo for rate limits). The reason set is open: clients that meet an unknown reason
fall back to the status code. Domain code raises these; it never imports grpc.
Every reason is also a value of the proto enum `agentrt.v1.ErrorReason` (see `Reason`).

Every error is bounded where it is built (`MeshError.__post_init__`), whatever it echoes:
the message to MAX_MESSAGE_BYTES, each metadata value to MAX_METADATA_VALUE_BYTES and each
key to MAX_METADATA_KEY_BYTES (UTF-8 bytes, cut on a character boundary with "…", seed 000
Truncate), at most MAX_METADATA_ENTRIES entries. An answer's trailing metadata (the
message, percent-encoded, plus the details, base64) then stays far below the 8 KiB a
default gRPC client accepts, so a caller that sent a 5,000-character id reads its
INVALID_ARGUMENT, not a RESOURCE_EXHAUSTED about metadata. `quote(value)` is how a message
names what it echoes: a bounded prefix, repr-quoted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from agentrt.core.truncate import truncate

ERROR_DOMAIN = "agentrt.dev"
#: Bounds of what one error carries, in bytes of UTF-8 (see the module docstring).
MAX_MESSAGE_BYTES = 1024
MAX_METADATA_VALUE_BYTES = 256
MAX_METADATA_KEY_BYTES = 64
MAX_METADATA_ENTRIES = 16
#: Most bytes of an echoed value `quote` shows.
QUOTE_BYTES = 64


class Status(enum.StrEnum):
    """The gRPC status names domain code may raise (mapped one to one by the mesh)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    CANCELLED = "CANCELLED"


class Reason(enum.StrEnum):
    """Stable ErrorInfo reasons. Add freely; never rename or reuse one.

    The contract of these is the proto enum `agentrt.v1.ErrorReason`
    (protos/agentrt/v1/error_reason.proto): each member's value is the name of one enum
    value, one to one, and docs/errors.md has a row for each. `core/` imports no generated
    code, so the link is a test: tests/unit/core/test_error_reasons.py fails, naming the
    reason, when a member has no enum value or a row (or an enum value has no member).
    """

    # Bad input (INVALID_ARGUMENT)
    MISSING_FIELD = "MISSING_FIELD"
    INVALID_ID = "INVALID_ID"
    INVALID_JSON = "INVALID_JSON"
    INVALID_UTF8 = "INVALID_UTF8"
    MALFORMED_REQUEST = "MALFORMED_REQUEST"  # INVALID_ARGUMENT: the request bytes are not a valid message
    INVALID_VALUE = "INVALID_VALUE"
    INVALID_AGENT = "INVALID_AGENT"
    INVALID_ENTRY = "INVALID_ENTRY"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    UNKNOWN_PROVIDER = "UNKNOWN_PROVIDER"
    UNSUPPORTED_CAPABILITY = "UNSUPPORTED_CAPABILITY"
    PATH_OUTSIDE_WORKSPACE = "PATH_OUTSIDE_WORKSPACE"
    # Unknown ids (NOT_FOUND)
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    ENTRY_NOT_FOUND = "ENTRY_NOT_FOUND"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    AGENT_NOT_FOUND = "AGENT_NOT_FOUND"
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    SANDBOX_NOT_FOUND = "SANDBOX_NOT_FOUND"
    # State (ALREADY_EXISTS / FAILED_PRECONDITION / ABORTED)
    SESSION_EXISTS = "SESSION_EXISTS"
    STALE_GENERATION = "STALE_GENERATION"
    SEQ_MISMATCH = "SEQ_MISMATCH"
    USAGE_ALREADY_RECORDED = "USAGE_ALREADY_RECORDED"
    RUN_NOT_SUSPENDED = "RUN_NOT_SUSPENDED"
    RUN_FINISHED = "RUN_FINISHED"
    SESSION_BUSY = "SESSION_BUSY"  # FAILED_PRECONDITION: the session already has an unfinished run
    TOKEN_COUNTING_UNSUPPORTED = "TOKEN_COUNTING_UNSUPPORTED"
    SANDBOX_UNAVAILABLE = "SANDBOX_UNAVAILABLE"
    NOT_IMPLEMENTED_YET = "NOT_IMPLEMENTED_YET"
    SANDBOX_STOPPED = "SANDBOX_STOPPED"  # FAILED_PRECONDITION: ExecuteTool in a stopped sandbox
    EXECUTION_IN_PROGRESS = "EXECUTION_IN_PROGRESS"  # ABORTED: the call runs in another process
    CALL_ID_REUSED = "CALL_ID_REUSED"  # INVALID_ARGUMENT: same run_id+call_id, different call
    CALLER_DEADLINE = "CALLER_DEADLINE"  # DEADLINE_EXCEEDED: the caller's deadline ended a tool call
    CONTEXT_TOO_LARGE = "CONTEXT_TOO_LARGE"  # FAILED_PRECONDITION: a context view beyond the response bound
    # Providers and dependencies
    RATE_LIMITED = "RATE_LIMITED"
    PROVIDER_UNAVAILABLE = "PROVIDER_UNAVAILABLE"
    PROVIDER_AUTHENTICATION = "PROVIDER_AUTHENTICATION"
    CONTEXT_OVERFLOW = "CONTEXT_OVERFLOW"
    INVALID_REQUEST = "INVALID_REQUEST"
    REFUSAL = "REFUSAL"
    DEPENDENCY_UNAVAILABLE = "DEPENDENCY_UNAVAILABLE"
    PROVIDER_NOT_CONFIGURED = "PROVIDER_NOT_CONFIGURED"  # FAILED_PRECONDITION: no key/URL/model file
    # Auth
    UNAUTHENTICATED = "UNAUTHENTICATED"
    TENANT_NOT_ALLOWED = "TENANT_NOT_ALLOWED"  # PERMISSION_DENIED: a tenant-bound token named another tenant
    # Anything else
    INTERNAL = "INTERNAL"
    MALFORMED_ARCHIVE = "MALFORMED_ARCHIVE"  # INVALID_ARGUMENT: an upload that is not a usable tar
    SANDBOX_FOREIGN = "SANDBOX_FOREIGN"  # FAILED_PRECONDITION: a container we did not create holds the name
    WORKSPACE_NOT_FOUND = "WORKSPACE_NOT_FOUND"  # NOT_FOUND: a workspace (or a directory in it) is missing
    WORKSPACE_NOT_WRITABLE = "WORKSPACE_NOT_WRITABLE"  # FAILED_PRECONDITION: commands could not write there
    INVALID_SCHEMA = "INVALID_SCHEMA"  # INVALID_ARGUMENT: a JSON Schema that fails its meta-schema
    UNKNOWN_AGENT = "UNKNOWN_AGENT"  # INVALID_ARGUMENT: a handoff/agent tool names no registered agent
    # Background tasks (004 §2.13)
    TASK_LIMIT = "TASK_LIMIT"  # FAILED_PRECONDITION: the parent has its maximum of live tasks
    TASK_DEPTH_LIMIT = "TASK_DEPTH_LIMIT"  # FAILED_PRECONDITION: a task may not spawn tasks this deep
    TASK_DEPTH_UNKNOWN = "TASK_DEPTH_UNKNOWN"  # FAILED_PRECONDITION: the parent's depth cannot be told
    TASK_NOT_RETRYABLE = "TASK_NOT_RETRYABLE"  # FAILED_PRECONDITION: only a failed task is retried
    TASK_ATTEMPTS_EXHAUSTED = "TASK_ATTEMPTS_EXHAUSTED"  # FAILED_PRECONDITION: the attempt ceiling
    RETRY_CONFLICT = "RETRY_CONFLICT"  # ABORTED: a concurrent writer moved the task (or run) first
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"  # INVALID_ARGUMENT: same key, another request
    SERVICE_STARTING = "SERVICE_STARTING"  # UNAVAILABLE: the service's start-up sweep has not run yet


@dataclass
class MeshError(Exception):
    """A domain error with a status, a stable reason and a user-safe message.

    Attributes:
        status: the gRPC status name it maps to.
        reason: the stable ErrorInfo reason.
        message: user-safe text.
        metadata: extra ErrorInfo metadata (string to string), e.g. {"field": "run_id"}.
        retry_after_seconds: set for RESOURCE_EXHAUSTED / UNAVAILABLE; becomes RetryInfo.
        peer: the service that answered the error, as its caller names it ("sessions",
            "tools", "gateway"), set by the caller's peer layer (runs/peers) so a failure can
            say who refused; "" = raised in this process, or unknown. Never sent on the wire.
    """

    status: Status
    reason: Reason | str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)
    retry_after_seconds: float | None = None
    peer: str = ""

    def __post_init__(self) -> None:
        self.message = truncate(str(self.message), MAX_MESSAGE_BYTES)
        if len(self.metadata) > MAX_METADATA_ENTRIES or any(
            len(k) > MAX_METADATA_KEY_BYTES // 4 or len(v) > MAX_METADATA_VALUE_BYTES // 4
            for k, v in self.metadata.items()
        ):
            self.metadata = bounded_metadata(self.metadata)

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"


def bounded_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """Return metadata cut to the bounds of the module docstring (first entries kept)."""
    out: dict[str, str] = {}
    for key, value in list(metadata.items())[:MAX_METADATA_ENTRIES]:
        out[truncate(str(key), MAX_METADATA_KEY_BYTES)] = truncate(str(value), MAX_METADATA_VALUE_BYTES)
    return out


def quote(value: object, limit_bytes: int = QUOTE_BYTES) -> str:
    """Return repr of value's text cut to limit_bytes bytes (a bounded prefix, "…" marking a cut)."""
    return repr(truncate(str(value), limit_bytes))


def invalid(reason: Reason | str, message: str, **metadata: str) -> MeshError:
    """Build an INVALID_ARGUMENT error."""
    return MeshError(Status.INVALID_ARGUMENT, reason, message, dict(metadata))


def not_found(reason: Reason | str, message: str, **metadata: str) -> MeshError:
    """Build a NOT_FOUND error."""
    return MeshError(Status.NOT_FOUND, reason, message, dict(metadata))


def precondition(reason: Reason | str, message: str, **metadata: str) -> MeshError:
    """Build a FAILED_PRECONDITION error."""
    return MeshError(Status.FAILED_PRECONDITION, reason, message, dict(metadata))


def missing(field_name: str) -> MeshError:
    """Build the INVALID_ARGUMENT/MISSING_FIELD error for a required field left empty."""
    return invalid(Reason.MISSING_FIELD, f"{field_name} is required", field=field_name)
