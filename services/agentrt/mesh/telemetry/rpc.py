"""Trace context across every gRPC hop, and the RPC metrics, as grpc.aio interceptors.

`TelemetryServerInterceptor` is the outermost interceptor of every `MeshServer`: for each
call of any of the four kinds it counts the call and its duration by method and final status
(`RpcMetrics`) and, while tracing is on, opens a SERVER span whose parent is the caller's
span named by the W3C `traceparent` metadata (health and reflection are counted, never
traced). The span is the current one while the handler runs, so the handler's own spans,
its peer calls and its log records join the caller's trace. The final status is what the
client sees: the code the handler aborted with (MeshInterceptor's MeshError mapping),
set with `set_code`, CANCELLED or DEADLINE_EXCEEDED for a call cut short, OK otherwise.

`client_interceptors(target)` returns one client interceptor per call kind (grpc.aio files
an interceptor object under the first kind it implements); `open_channel` installs them
when tracing is on. Each opens a CLIENT span for the call, a child of the current span,
injects its `traceparent`/`tracestate` into the call's metadata, and ends it when the call
finishes, fails or is cancelled (a done callback: a stream the caller leaves early ends its
span at the cancel, not at garbage collection).

Why our own and not opentelemetry-instrumentation-grpc: its aio server interceptor records
neither `abort_with_status` (every error of this mesh) nor its code, so failed calls would be
exported as OK; its client stream wrapper ends a span only when the stream is read to its
end (docs/decisions/0009-observability.md).

Span names and attributes follow the OpenTelemetry RPC conventions: "<service>/<method>",
`rpc.system`, `rpc.service`, `rpc.method`, `rpc.grpc.status_code`, `server.address` and
`server.port` (client), `network.peer.address` (server). A server span's status is ERROR
only for the server-fault codes of the convention; a client span's for any code but OK.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrt.mesh.telemetry.metrics import RpcMetrics
from agentrt.mesh.telemetry.tracing import tracer

_UNTRACED = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_W3C = TraceContextTextMapPropagator()
_PROPAGATED = ("traceparent", "tracestate")
#: Codes that are the server's fault (OpenTelemetry RPC conventions, gRPC server spans).
_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _split(method: str) -> tuple[str, str]:
    """Split a method path: "/agentrt.v1.RunService/StartRun" -> (service, method)."""
    service, _, name = method.lstrip("/").partition("/")
    return service, name


class _Call:
    """What the server side knows of one call while it is served."""

    __slots__ = ("service", "method", "started", "span", "token")

    def __init__(self, service: str, method: str) -> None:
        self.service, self.method = service, method
        self.started = time.perf_counter()
        self.span: trace.Span | None = None
        self.token: object | None = None


def _failed_code(exc: BaseException, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """Return the status a call that raised `exc` ends with."""
    if isinstance(exc, asyncio.CancelledError):
        remaining = context.time_remaining()
        expired = remaining is not None and remaining <= 0
        return grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN  # gRPC's answer to an exception no interceptor mapped


class TelemetryServerInterceptor(grpc.aio.ServerInterceptor):
    """Counts every call and traces it while tracing is on (see the module docstring)."""

    def __init__(self, metrics: RpcMetrics) -> None:
        """Record into metrics (the server's RPC series)."""
        self._metrics = metrics
        self._in_flight: dict[tuple[str, str], Any] = {}
        self._done: dict[tuple[str, str, grpc.StatusCode], tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """Wrap the handler of one call, whatever its kind."""
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method or ""
        wrap = self._wrap_stream if handler.response_streaming else self._wrap_unary
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                wrap(handler.unary_unary, details, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                wrap(handler.unary_stream, details, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                wrap(handler.stream_unary, details, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            wrap(handler.stream_stream, details, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _begin(
        self, details: grpc.HandlerCallDetails, method: str, context: grpc.aio.ServicerContext
    ) -> _Call:
        service, name = _split(method)
        gauge = self._in_flight.get((service, name))
        if gauge is None:
            gauge = self._in_flight[(service, name)] = self._metrics.in_flight.labels(service, name)
        gauge.inc()
        call = _Call(service, name)
        active = tracer()
        if active is not None and not method.startswith(_UNTRACED):
            carrier = {k: v for k, v in (details.invocation_metadata or ()) if k in _PROPAGATED}
            # Without a traceparent the call starts a trace of its own (an empty context,
            # never whatever span happened to be current where the server was started).
            parent = _W3C.extract(carrier)
            attributes: dict[str, str | int] = {
                "rpc.system": "grpc",
                "rpc.service": service,
                "rpc.method": name,
            }
            peer = context.peer() or ""
            if peer.startswith(("ipv4:", "ipv6:")):
                address, _, port = peer.partition(":")[2].rpartition(":")
                attributes["network.peer.address"] = address.strip("[]")
                if port.isdigit():
                    attributes["network.peer.port"] = int(port)
            call.span = active.start_span(
                f"{service}/{name}", context=parent, kind=SpanKind.SERVER, attributes=attributes
            )
            call.token = otel_context.attach(trace.set_span_in_context(call.span, parent))
        return call

    def _end(self, call: _Call, code: grpc.StatusCode, context: grpc.aio.ServicerContext) -> None:
        elapsed = time.perf_counter() - call.started
        key = (call.service, call.method, code)
        children = self._done.get(key)
        if children is None:
            labels = (call.service, call.method, code.name)
            children = self._done[key] = (
                self._metrics.requests.labels(*labels),
                self._metrics.duration.labels(*labels),
            )
        children[0].inc()
        children[1].observe(elapsed)
        self._in_flight[(call.service, call.method)].dec()
        if call.span is not None:
            call.span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code in _SERVER_FAULTS:
                details = context.details() if code is not grpc.StatusCode.CANCELLED else None
                call.span.set_status(Status(StatusCode.ERROR, details or code.name))
            call.span.end()
        if call.token is not None:
            otel_context.detach(call.token)  # type: ignore[arg-type]

    def _wrap_unary(
        self, behavior: Callable[..., Awaitable[Any]], details: grpc.HandlerCallDetails, method: str
    ) -> Callable[..., Awaitable[Any]]:
        async def served(request: Any, context: grpc.aio.ServicerContext) -> Any:
            call = self._begin(details, method, context)
            code = grpc.StatusCode.OK
            try:
                response = await behavior(request, context)
                set_code = context.code()
                if isinstance(set_code, grpc.StatusCode):
                    code = set_code
                return response
            except BaseException as exc:
                code = _failed_code(exc, context)
                raise
            finally:
                self._end(call, code, context)

        return served

    def _wrap_stream(
        self, behavior: Callable[..., AsyncIterator[Any]], details: grpc.HandlerCallDetails, method: str
    ) -> Callable[..., AsyncIterator[Any]]:
        async def served(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            call = self._begin(details, method, context)
            code = grpc.StatusCode.OK
            try:
                async for response in behavior(request, context):
                    yield response
                set_code = context.code()
                if isinstance(set_code, grpc.StatusCode):
                    code = set_code
            except BaseException as exc:
                code = _failed_code(exc, context)
                raise
            finally:
                self._end(call, code, context)

        return served


# ------------------------------------------------------------------------------- client side


class _ClientTracing:
    """Opens the CLIENT span of a call and carries its context in the call's metadata."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition("/")[2].rpartition(":")
        self._attributes: dict[str, str | int] = {"rpc.system": "grpc"}
        if host:
            self._attributes["server.address"] = host.strip("[]")
        if port.isdigit():
            self._attributes["server.port"] = int(port)
        self._finishing: set[asyncio.Task[None]] = set()

    def _start(
        self, details: grpc.aio.ClientCallDetails
    ) -> tuple[trace.Span, grpc.aio.ClientCallDetails] | None:
        active = tracer()
        if active is None:
            return None
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        service, name = _split(method)
        span = active.start_span(
            f"{service}/{name}",
            kind=SpanKind.CLIENT,
            attributes={**self._attributes, "rpc.service": service, "rpc.method": name},
        )
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=trace.set_span_in_context(span))
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in carrier.items():
            metadata[key] = value
        return span, grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    def _watch(self, span: trace.Span, call: Any) -> Any:
        """End span when call is done; return call."""

        def done(finished: Any) -> None:
            task = asyncio.get_running_loop().create_task(self._finish(span, finished))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)

        try:
            call.add_done_callback(done)
        except NotImplementedError:  # a response iterator some interceptor made: no callback
            _end_client(span, None)
        return call

    async def _finish(self, span: trace.Span, call: Any) -> None:
        try:
            code = await call.code()
        except Exception:  # noqa: BLE001 - a span must end whatever the call did
            code = grpc.StatusCode.UNKNOWN
        _end_client(span, code)

    async def _intercept(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        started = self._start(details)
        if started is None:
            return await continuation(details, request)
        span, details = started
        try:
            call = await continuation(details, request)
        except BaseException as exc:
            code = exc.code() if isinstance(exc, grpc.RpcError) else grpc.StatusCode.CANCELLED
            _end_client(span, code)  # type: ignore[arg-type]
            raise
        return self._watch(span, call)


def _end_client(span: trace.Span, code: grpc.StatusCode | None) -> None:
    if code is not None:
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code is not grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, code.name))
    span.end()


class _UnaryUnary(_ClientTracing, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        """Trace a unary call.

        Its answer is awaited here (the caller awaits it anyway), which spares the done
        callback's task the streaming kinds need.
        """
        started = self._start(details)
        if started is None:
            return await continuation(details, request)
        span, details = started
        call = None
        try:
            call = await continuation(details, request)
            code = await call.code()
        except BaseException as exc:
            if call is not None:
                call.cancel()  # the caller gave up while the answer was awaited here
            _end_client(span, exc.code() if isinstance(exc, grpc.RpcError) else grpc.StatusCode.CANCELLED)
            raise
        _end_client(span, code)
        return call


class _UnaryStream(_ClientTracing, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        """Trace a server-streaming call."""
        return await self._intercept(continuation, details, request)


class _StreamUnary(_ClientTracing, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):  # type: ignore[no-untyped-def]
        """Trace a client-streaming call."""
        return await self._intercept(continuation, details, request_iterator)


class _StreamStream(_ClientTracing, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):  # type: ignore[no-untyped-def]
        """Trace a bidirectional-streaming call."""
        return await self._intercept(continuation, details, request_iterator)


def client_interceptors(target: str) -> list[grpc.aio.ClientInterceptor]:
    """Return the tracing interceptors of a channel to target ("host:port" or a gRPC target).

    Each checks at call time whether tracing is on (a call made while it is off passes
    through untouched); `open_channel` installs them only when tracing is on at open time.
    """
    return [_UnaryUnary(target), _UnaryStream(target), _StreamUnary(target), _StreamStream(target)]
