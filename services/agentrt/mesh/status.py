"""Turn domain errors into gRPC statuses with typed details, and read them back.

`to_rpc_status` builds a google.rpc.Status with an ErrorInfo (domain "agentrt.dev",
the stable reason) and, when the error says when to retry, a RetryInfo. Clients read the
reason with `reason_of(rpc_error)` (the string) or `reason_code_of(rpc_error)` (the value of
the generated enum `agentrt.v1.ErrorReason`, the contract; docs/errors.md). What it answers
is bounded as `core.errors` bounds an error (message and metadata in bytes), also for an
error whose fields were changed after it was built, so no answer outgrows a default
client's 8 KiB metadata limit.
"""

from __future__ import annotations

import logging

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from agentrt.core.errors import (
    ERROR_DOMAIN,
    MAX_MESSAGE_BYTES,
    MeshError,
    Reason,
    Status,
    bounded_metadata,
)
from agentrt.core.truncate import truncate
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import error_reason_pb2

_log = logging.getLogger(__name__)
#: The reasons the contract names (agentrt.v1.ErrorReason), as their wire strings.
CONTRACT_REASONS = frozenset(error_reason_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}

_CODES: dict[Status, tuple[grpc.StatusCode, int]] = {
    Status.INVALID_ARGUMENT: (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
    Status.NOT_FOUND: (grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND),
    Status.ALREADY_EXISTS: (grpc.StatusCode.ALREADY_EXISTS, code_pb2.ALREADY_EXISTS),
    Status.FAILED_PRECONDITION: (grpc.StatusCode.FAILED_PRECONDITION, code_pb2.FAILED_PRECONDITION),
    Status.ABORTED: (grpc.StatusCode.ABORTED, code_pb2.ABORTED),
    Status.RESOURCE_EXHAUSTED: (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),
    Status.UNAVAILABLE: (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
    Status.UNAUTHENTICATED: (grpc.StatusCode.UNAUTHENTICATED, code_pb2.UNAUTHENTICATED),
    Status.PERMISSION_DENIED: (grpc.StatusCode.PERMISSION_DENIED, code_pb2.PERMISSION_DENIED),
    Status.DEADLINE_EXCEEDED: (grpc.StatusCode.DEADLINE_EXCEEDED, code_pb2.DEADLINE_EXCEEDED),
    Status.UNIMPLEMENTED: (grpc.StatusCode.UNIMPLEMENTED, code_pb2.UNIMPLEMENTED),
    Status.INTERNAL: (grpc.StatusCode.INTERNAL, code_pb2.INTERNAL),
    Status.CANCELLED: (grpc.StatusCode.CANCELLED, code_pb2.CANCELLED),
}


def grpc_code(status: Status) -> grpc.StatusCode:
    """Return the grpc.StatusCode for a domain status name."""
    return _CODES[status][0]


def to_rpc_status(err: MeshError) -> status_pb2.Status:
    """Build the google.rpc.Status (with ErrorInfo and optional RetryInfo) for err.

    A reason outside agentrt.v1.ErrorReason is still sent (clients fall back to the status
    code) and logged, since no client has a value for it.
    """
    if str(err.reason) not in CONTRACT_REASONS:
        _log.warning("error reason %r is not in agentrt.v1.ErrorReason", str(err.reason))
    info = error_details_pb2.ErrorInfo(
        reason=truncate(str(err.reason), 63), domain=ERROR_DOMAIN, metadata=bounded_metadata(err.metadata)
    )
    details = [_pack(info)]
    if err.retry_after_seconds is not None:
        secs = max(0.0, err.retry_after_seconds)
        delay = duration_pb2.Duration(seconds=int(secs), nanos=int((secs % 1) * 1e9))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    message = truncate(str(err.message), MAX_MESSAGE_BYTES)
    return status_pb2.Status(code=_CODES[err.status][1], message=message, details=details)


def _pack(msg: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(msg)  # type: ignore[arg-type]
    return packed


def to_grpc_status(err: MeshError) -> grpc.Status:
    """Return the grpc.Status object to abort a call with (grpc_status.rpc_status)."""
    return rpc_status.to_status(to_rpc_status(err))


def details_of(error: grpc.RpcError) -> tuple[str, dict[str, str], float | None]:
    """Read (reason, metadata, retry_after_seconds) off a failed call; ("", {}, None) if absent."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a malformed trailer reads as "no details"
        status = None
    reason, retry = "", None
    meta: dict[str, str] = {}
    if status is None:
        return reason, meta, retry
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, meta = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            ri = error_details_pb2.RetryInfo()
            detail.Unpack(ri)
            retry = ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
    return reason, meta, retry


def reason_of(error: grpc.RpcError) -> str:
    """Return the ErrorInfo reason of a failed call, "" when it carries none."""
    return details_of(error)[0]


def reason_code_of(error: grpc.RpcError) -> int:
    """Return the agentrt.v1.ErrorReason value of a failed call's reason.

    ERROR_REASON_UNSPECIFIED (0) when the call carries no reason or one newer than these
    contracts.
    """
    reason = reason_of(error)
    return error_reason_pb2.ErrorReason.Value(reason) if reason in CONTRACT_REASONS else 0


def from_rpc_error(error: grpc.RpcError) -> MeshError:
    """Rebuild a MeshError from a peer's failed call, so a service can pass it on."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    reason, meta, retry = details_of(error)
    status = next((s for s, (c, _) in _CODES.items() if c == code), Status.UNAVAILABLE)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN) and not reason:
        reason = Reason.DEPENDENCY_UNAVAILABLE
    text = error.details() if hasattr(error, "details") else str(error)
    return MeshError(status, reason or Reason.INTERNAL, text or "peer error", meta, retry)


def call_error(err: MeshError) -> cpb.CallError:
    """Return the CallError a stream of calls answers for err (mesh/calls.py).

    Its status code, message, ErrorInfo reason and metadata, and RetryInfo delay, bounded as
    `to_rpc_status` bounds them.
    """
    out = cpb.CallError(
        code=_CODES[err.status][1],
        message=truncate(str(err.message), MAX_MESSAGE_BYTES),
        reason=truncate(str(err.reason), 63),
        metadata=bounded_metadata(err.metadata),
    )
    if err.retry_after_seconds is not None:
        out.retry_delay.FromNanoseconds(int(max(0.0, err.retry_after_seconds) * 1e9))
    return out


def from_call_error(error: cpb.CallError) -> MeshError:
    """Rebuild the MeshError of a call that failed inside a stream of calls (see call_error)."""
    status = next((s for s, (_, c) in _CODES.items() if c == error.code), Status.INTERNAL)
    retry = error.retry_delay.ToNanoseconds() / 1e9 if error.HasField("retry_delay") else None
    return MeshError(
        status, error.reason or Reason.INTERNAL, error.message or "peer error", dict(error.metadata), retry
    )
