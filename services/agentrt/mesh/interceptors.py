"""The server interceptor every service installs: auth, tenant, size bound, errors.

For each RPC (health and reflection excepted, so probes need no token) it:
- checks the bearer token when the service has one, the shared token or one of a token
  file's (UNAUTHENTICATED otherwise);
- takes the tenant from the token when the token is bound to one (a header naming another
  tenant: PERMISSION_DENIED/TENANT_NOT_ALLOWED), else from `x-agentrt-tenant`
  (INVALID_ARGUMENT/INVALID_ID when malformed; "default" when absent);
- turns a request that could not be parsed into INVALID_ARGUMENT instead of gRPC's INTERNAL:
  reason INVALID_UTF8 for a string field that is not UTF-8, MALFORMED_REQUEST otherwise;
- refuses a request larger than the configured bound (INVALID_ARGUMENT/REQUEST_TOO_LARGE);
  for a client stream (UploadWorkspace), each message as it arrives;
- maps a raised MeshError to its status + ErrorInfo, a method the servicer does not
  implement to UNIMPLEMENTED/NOT_IMPLEMENTED_YET, and any other exception to
  INTERNAL/INTERNAL (logged with its stack), so a server never dies of a request.

A bidirectional stream (a stream of calls, mesh/calls.py) is checked like a client stream:
auth and tenant once, when it opens (the tenant then holds for every call on it), each
message as it arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from agentrt.core.errors import MeshError, Reason, Status, invalid
from agentrt.mesh.context import (
    DEFAULT_TENANT,
    TENANT_HEADER,
    reset_tenant,
    set_server_stopping,
    set_tenant,
    valid_tenant,
)
from agentrt.mesh.security import ANY_TENANT, TokenTable, identify
from agentrt.mesh.status import to_grpc_status
from agentrt.mesh.storage.transient import database_unavailable

log = logging.getLogger("agentrt.mesh")

_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
#: A method the servicer does not implement (the generated base's NotImplementedError):
#: UNIMPLEMENTED, as gRPC answers a method it does not know, not INTERNAL.
_NOT_SERVED = MeshError(
    Status.UNIMPLEMENTED, Reason.NOT_IMPLEMENTED_YET, "this service does not serve the method"
)


class _Unparsable:
    """Stands in for a request whose bytes did not parse."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, UnicodeDecodeError, ValueError) as exc:
            return _Unparsable(exc)

    return parse


class MeshInterceptor(grpc.aio.ServerInterceptor):
    """Auth, tenant, request bound and error mapping for every RPC of a service."""

    def __init__(
        self,
        *,
        auth_token: str = "",
        tokens: TokenTable | None = None,
        max_request_bytes: int = 16 * 1024 * 1024,
        stopping: asyncio.Event | None = None,
    ) -> None:
        """Create the interceptor.

        Args:
            auth_token: the shared bearer token (any tenant by header); "" = none.
            tokens: tenant-bound bearer tokens; None = none. With neither, auth is off.
            max_request_bytes: largest request accepted, in bytes.
            stopping: the server's event set when its drain begins, named to every bidi
                stream (`agentrt.mesh.context.server_stopping`); None = not known.
        """
        self._token = auth_token
        self._tokens = tokens
        self._max = max_request_bytes
        self._stopping = stopping

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """Wrap the handler of one call (see the module docstring)."""
        handler = await continuation(details)
        method = details.method or ""
        if handler is None or method.startswith(_OPEN_PREFIXES):
            return handler
        metadata = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        failure, tenant = self._check_metadata(metadata)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, tenant, failure, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, tenant, failure, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_client_stream(handler.stream_unary, tenant, failure, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._wrap_bidi(handler.stream_stream, tenant, failure, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler

    def _check_metadata(self, metadata: dict[str, str]) -> tuple[MeshError | None, str]:
        """Return (the call's failure or None, the call's tenant)."""
        named = metadata.get(TENANT_HEADER)
        tenant = named if named is not None else DEFAULT_TENANT
        if self._token or self._tokens is not None:
            sent = metadata.get("authorization", "")
            bearer = sent[len("Bearer ") :] if sent.startswith("Bearer ") else ""
            caller = identify(bearer, self._token, self._tokens)
            if caller is None:
                refused = "missing or wrong bearer token"
                return MeshError(Status.UNAUTHENTICATED, Reason.UNAUTHENTICATED, refused), tenant
            if caller.tenant != ANY_TENANT:
                if named is not None and named != caller.tenant:
                    return (
                        MeshError(
                            Status.PERMISSION_DENIED,
                            Reason.TENANT_NOT_ALLOWED,
                            f"this token may not act for the tenant named in {TENANT_HEADER}",
                            {"field": TENANT_HEADER},
                        ),
                        caller.tenant,
                    )
                tenant = caller.tenant
        if not valid_tenant(tenant):
            return (
                invalid(Reason.INVALID_ID, f"malformed tenant in {TENANT_HEADER}", field=TENANT_HEADER),
                DEFAULT_TENANT,
            )
        return None, tenant

    def _precheck(self, request: Any, failure: MeshError | None) -> MeshError | None:
        if failure is not None:
            return failure
        if isinstance(request, _Unparsable):
            text = str(request.error)
            # The protobuf runtime reports both as DecodeError; only its text tells them apart.
            reason = (
                Reason.INVALID_UTF8
                if "UTF-8" in text or isinstance(request.error, UnicodeError)
                else (Reason.MALFORMED_REQUEST)
            )
            return invalid(reason, f"request could not be parsed: {text}")
        size = request.ByteSize()
        if size > self._max:
            return invalid(
                Reason.REQUEST_TOO_LARGE,
                f"request is {size} bytes; the limit is {self._max} bytes",
                limit_bytes=str(self._max),
            )
        return None

    def _wrap_unary(
        self, behavior: Callable[..., Awaitable[Any]], tenant: str, failure: MeshError | None, method: str
    ) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            problem = self._precheck(request, failure)
            if problem is not None:
                await context.abort_with_status(to_grpc_status(problem))
            token = set_tenant(tenant)
            try:
                return await _answered(behavior(request, context), context, method)
            finally:
                reset_tenant(token)

        return call

    async def _checked(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Yield a client stream's messages, raising MeshError for one that is unparsable or too large."""
        async for request in requests:
            problem = self._precheck(request, None)
            if problem is not None:
                raise problem
            yield request

    def _wrap_client_stream(
        self, behavior: Callable[..., Awaitable[Any]], tenant: str, failure: MeshError | None, method: str
    ) -> Callable[..., Awaitable[Any]]:
        """Wrap a client-streaming handler: metadata first, then each message as it arrives."""

        async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            if failure is not None:
                await context.abort_with_status(to_grpc_status(failure))
            token = set_tenant(tenant)
            try:
                return await _answered(behavior(self._checked(requests), context), context, method)
            finally:
                reset_tenant(token)

        return call

    def _wrap_bidi(
        self, behavior: Callable[..., AsyncIterator[Any]], tenant: str, failure: MeshError | None, method: str
    ) -> Callable[..., AsyncIterator[Any]]:
        """Wrap a bidirectional handler: metadata when it opens, then each message as it arrives."""

        async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if failure is not None:
                await context.abort_with_status(to_grpc_status(failure))
            set_tenant(tenant)
            set_server_stopping(self._stopping)
            try:
                async for item in behavior(self._checked(requests), context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # noqa: BLE001 - a server never dies of a request
                await context.abort_with_status(to_grpc_status(_failure_of(exc, method)))

        return call

    def _wrap_stream(
        self, behavior: Callable[..., AsyncIterator[Any]], tenant: str, failure: MeshError | None, method: str
    ) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            problem = self._precheck(request, failure)
            if problem is not None:
                await context.abort_with_status(to_grpc_status(problem))
            set_tenant(tenant)
            try:
                async for item in behavior(request, context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # noqa: BLE001 - a server never dies of a request
                await context.abort_with_status(to_grpc_status(_failure_of(exc, method)))

        return call


async def _answered(outcome: Awaitable[Any], context: grpc.aio.ServicerContext, method: str) -> Any:
    """Await a handler's answer; a MeshError becomes its status, anything else INTERNAL (logged)."""
    try:
        return await outcome
    except grpc.aio.AbortError:
        raise
    except Exception as exc:  # noqa: BLE001 - a server never dies of a request
        await context.abort_with_status(to_grpc_status(_failure_of(exc, method)))


def _failure_of(exc: Exception, method: str) -> MeshError:
    """Return the status a handler's exception ends its call with.

    A MeshError as raised; a method the servicer does not implement UNIMPLEMENTED; a transient
    database failure UNAVAILABLE (mesh/storage/transient.py `database_unavailable`); anything else
    INTERNAL (logged, with the traceback of the exception being handled).
    """
    if isinstance(exc, MeshError):
        return exc
    if isinstance(exc, NotImplementedError):
        return _NOT_SERVED
    if (unavailable := database_unavailable(exc)) is not None:
        log.warning("%s: %s", method, unavailable.message)
        return unavailable
    log.exception("unhandled error in %s", method)
    return MeshError(Status.INTERNAL, Reason.INTERNAL, "internal error")
