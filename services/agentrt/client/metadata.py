"""Call metadata every client call carries: the bearer token and the tenant.

`metadata_interceptors(pairs)` returns one grpc.aio client interceptor per call kind
(unary-unary, unary-stream, stream-unary, stream-stream): grpc.aio files each interceptor
object under the FIRST call kind it implements, so one object cannot serve all four. A key
the caller already set on the call (e.g. another tenant for one call) is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from agentrt.mesh.context import TENANT_HEADER


def auth_pairs(token: str = "", tenant: str = "") -> list[tuple[str, str]]:
    """Return the metadata pairs for a token and a tenant ("" leaves a pair out).

    `authorization: Bearer <token>` and `x-agentrt-tenant: <tenant>`.
    """
    pairs: list[tuple[str, str]] = []
    if token:
        pairs.append(("authorization", f"Bearer {token}"))
    if tenant:
        pairs.append((TENANT_HEADER, tenant))
    return pairs


class _MetadataAdder:
    """Adds fixed metadata pairs to a call's details."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._pairs = tuple(pairs)

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        md = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in self._pairs:
            if key not in md:
                md.add(key, value)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, md, details.credentials, details.wait_for_ready
        )


class _UnaryUnary(_MetadataAdder, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        """Add the metadata to a unary call."""
        return await continuation(self._details(details), request)


class _UnaryStream(_MetadataAdder, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        """Add the metadata to a server-streaming call."""
        return await continuation(self._details(details), request)


class _StreamUnary(_MetadataAdder, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):  # type: ignore[no-untyped-def]
        """Add the metadata to a client-streaming call (e.g. UploadWorkspace)."""
        return await continuation(self._details(details), request_iterator)


class _StreamStream(_MetadataAdder, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):  # type: ignore[no-untyped-def]
        """Add the metadata to a bidirectional-streaming call."""
        return await continuation(self._details(details), request_iterator)


def metadata_interceptors(pairs: Sequence[tuple[str, str]]) -> list[grpc.aio.ClientInterceptor]:
    """Return interceptors adding `pairs` to calls of all four kinds ([] for no pairs)."""
    if not pairs:
        return []
    return [_UnaryUnary(pairs), _UnaryStream(pairs), _StreamUnary(pairs), _StreamStream(pairs)]
