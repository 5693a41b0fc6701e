"""Trace context across every gRPC hop, the caller's side: CLIENT spans as grpc.aio interceptors.

`client_interceptors(target)` returns one client interceptor per call kind (grpc.aio files
an interceptor object under the first kind it implements); `open_channel` installs them
when tracing is on. Each opens a CLIENT span for the call, a child of the current span,
injects its `traceparent`/`tracestate` into the call's metadata, and ends it when the call
finishes, fails or is cancelled (a done callback: a stream the caller leaves early ends its
span at the cancel, not at garbage collection). `client_call` does the same for one call sent
over a stream of calls (agentrt.client.calls): its span, and the traceparent its header carries.

Why our own and not opentelemetry-instrumentation-grpc: its client stream wrapper ends a
span only when the stream is read to its end (docs/decisions/0009-observability.md). Span
names and attributes follow the OpenTelemetry RPC conventions (see mesh/telemetry/rpc.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from agentrt.core.errors import MeshError
from agentrt.mesh.status import grpc_code
from agentrt.mesh.telemetry.rpc import _W3C, _split
from agentrt.mesh.telemetry.tracing import tracer


@contextlib.contextmanager
def client_call(service: str, method: str) -> Iterator[str]:
    """Trace one call sent over a stream of calls: yields the traceparent its header carries.

    A CLIENT span "<service>/<method>", a child of the current span, ended when the block
    ends (ERROR with the call's status when it raised a MeshError or was cancelled). While
    tracing is off it yields "" and records nothing.
    """
    active = tracer()
    if active is None:
        yield ""
        return
    span = active.start_span(
        f"{service}/{method}",
        kind=SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
    )
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    code: grpc.StatusCode | None = grpc.StatusCode.OK
    try:
        yield carrier.get("traceparent", "")
    except MeshError as err:
        code = grpc_code(err.status)
        raise
    except asyncio.CancelledError:
        code = grpc.StatusCode.CANCELLED
        raise
    except BaseException:
        code = grpc.StatusCode.UNKNOWN
        raise
    finally:
        _end_client(span, code)


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
