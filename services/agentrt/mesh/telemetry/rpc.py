"""Trace context across every gRPC hop, and the RPC metrics, as grpc.aio interceptors.

`TelemetryServerInterceptor` is the outermost interceptor of every `MeshServer`: for each
call of any of the four kinds it counts the call and its duration by method and final status
(`RpcMetrics`) and, while tracing is on, opens a SERVER span whose parent is the caller's
span named by the W3C `traceparent` metadata (health and reflection are counted, never
traced). The span is the current one while the handler runs, so the handler's own spans,
its peer calls and its log records join the caller's trace. The final status is what the
client sees: the code the handler aborted with (MeshInterceptor's MeshError mapping),
set with `set_code`, CANCELLED or DEADLINE_EXCEEDED for a call cut short (a cancel within
DEADLINE_SLACK_S of the deadline is the deadline's), OK otherwise.

The client side (the CLIENT spans and their trace context) is `mesh/telemetry/rpc_client.py`.
A call served inside a stream of calls (mesh/calls.py) is counted and traced as an RPC of its
own method (`inner_call`).

Why our own and not opentelemetry-instrumentation-grpc: its aio server interceptor records
neither `abort_with_status` (every error of this mesh) nor its code, so failed calls would be
exported as OK (docs/decisions/0009-observability.md).

Span names and attributes follow the OpenTelemetry RPC conventions: "<service>/<method>",
`rpc.system`, `rpc.service`, `rpc.method`, `rpc.grpc.status_code`, `server.address` and
`server.port` (client), `network.peer.address` (server). A server span's status is ERROR
only for the server-fault codes of the convention; a client span's for any code but OK.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrt.core.errors import MeshError
from agentrt.mesh.status import grpc_code
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


#: A call cancelled this close to the server's deadline, in seconds, was cut by the deadline.
#: The caller's deadline timer fires first by the request's transit time (the server counts
#: its deadline from the request's arrival) and its cancel reaches the server before the
#: server's own timer (seen on a loaded machine: the caller saw DEADLINE_EXCEEDED, the
#: server span said CANCELLED).
DEADLINE_SLACK_S = 0.1


def _failed_code(exc: BaseException, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """Return the status a call that raised `exc` ends with.

    A cancellation is DEADLINE_EXCEEDED when the call had a deadline and at most
    DEADLINE_SLACK_S seconds of it were left, CANCELLED otherwise. A streaming handler closed
    at a `yield` (GeneratorExit: grpc finalized the response generator of a call that ended
    early) is a cancellation too.
    """
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        remaining = context.time_remaining()
        expired = remaining is not None and remaining <= DEADLINE_SLACK_S
        return grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN  # gRPC's answer to an exception no interceptor mapped


class InnerOutcome:
    """How one call inside a stream of calls ended (`inner_call`): OK unless told otherwise."""

    __slots__ = ("code", "message")

    def __init__(self) -> None:
        self.code = grpc.StatusCode.OK
        self.message = ""

    def fail(self, err: MeshError) -> None:
        """The call failed with err (its status is the call's code)."""
        self.code, self.message = grpc_code(err.status), err.message

    def cancelled(self) -> None:
        """The caller stopped waiting, or the stream ended, before the call answered."""
        self.code = grpc.StatusCode.CANCELLED


#: The interceptor serving the stream of calls being handled (set for its handler's task).
_SERVING: contextvars.ContextVar[TelemetryServerInterceptor | None] = contextvars.ContextVar(
    "agentrt_rpc_telemetry", default=None
)


def serve_inner_calls(interceptor: TelemetryServerInterceptor) -> None:
    """Record the inner calls of the current context as `interceptor`'s server's RPCs.

    For a stream of calls served without the wire (mesh/local_calls.py), which no
    interceptor wraps: its calls are counted and traced as the same calls over gRPC are.
    """
    _SERVING.set(interceptor)


@contextlib.contextmanager
def inner_call(service: str, method: str, traceparent: str) -> Any:
    """Count and trace one call of a stream of calls (mesh/calls.py) as an RPC of its own.

    The call is recorded as `service`/`method`, its span a child of `traceparent`; yields
    its InnerOutcome to fill in. Outside a stream the TelemetryServerInterceptor serves,
    nothing is recorded.
    """
    outcome = InnerOutcome()
    serving = _SERVING.get()
    if serving is None:
        yield outcome
        return
    call = serving._begin_inner(service, method, traceparent)
    try:
        yield outcome
    finally:
        serving._end_inner(call, outcome)


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
            self._wrap_stream(handler.stream_stream, details, method, serves_calls=True),
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

    def _begin_inner(self, service: str, method: str, traceparent: str) -> _Call:
        """Begin a call served inside a stream of calls: its gauge, and its span while tracing."""
        gauge = self._in_flight.get((service, method))
        if gauge is None:
            gauge = self._in_flight[(service, method)] = self._metrics.in_flight.labels(service, method)
        gauge.inc()
        call = _Call(service, method)
        active = tracer()
        if active is not None:
            parent = _W3C.extract({"traceparent": traceparent} if traceparent else {})
            call.span = active.start_span(
                f"{service}/{method}",
                context=parent,
                kind=SpanKind.SERVER,
                attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
            )
            call.token = otel_context.attach(trace.set_span_in_context(call.span, parent))
        return call

    def _end_inner(self, call: _Call, outcome: InnerOutcome) -> None:
        """End a call begun by `_begin_inner` with its outcome (counted as an RPC of its method)."""
        self._record(call, outcome.code)
        if call.span is not None:
            call.span.set_attribute("rpc.grpc.status_code", outcome.code.value[0])
            if outcome.code in _SERVER_FAULTS:
                call.span.set_status(Status(StatusCode.ERROR, outcome.message or outcome.code.name))
            call.span.end()
        if call.token is not None:
            otel_context.detach(call.token)  # type: ignore[arg-type]

    def _record(self, call: _Call, code: grpc.StatusCode) -> None:
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

    def _end(self, call: _Call, code: grpc.StatusCode, context: grpc.aio.ServicerContext) -> None:
        self._record(call, code)
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
        self,
        behavior: Callable[..., AsyncIterator[Any]],
        details: grpc.HandlerCallDetails,
        method: str,
        *,
        serves_calls: bool = False,
    ) -> Callable[..., AsyncIterator[Any]]:
        async def served(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            call = self._begin(details, method, context)
            code = grpc.StatusCode.OK
            if serves_calls:
                _SERVING.set(self)  # the calls inside count as their own method's RPCs
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
