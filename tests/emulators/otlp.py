"""An OTLP trace collector for tests: the real TraceService Export over gRPC, and OTLP/HTTP.

`OtlpCollector` serves `opentelemetry.proto.collector.trace.v1.TraceService` (the
`opentelemetry-proto` package's generated code) on 127.0.0.1 with a gRPC server of its own,
and `POST /v1/traces` (binary protobuf, gzip or not) on an HTTP server, both on threads, so
the test process and the service processes it starts can all export to it. Every exported
span is kept, flattened into a `ReceivedSpan`. Nothing is mocked: the exporters the services
use are the OpenTelemetry SDK's own.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

#: OTLP span kinds, by their enum number (opentelemetry/proto/trace/v1/trace.proto).
KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it (ids in lower-case hex, "" for no parent)."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    events: tuple[str, ...] = field(default=())


class _TraceService(pb_grpc.TraceServiceServicer):
    def __init__(self, sink: Callable[[pb.ExportTraceServiceRequest], None]) -> None:
        self._sink = sink

    def Export(self, request, context):  # noqa: N802 - the generated name
        self._sink(request)
        return pb.ExportTraceServiceResponse()


class OtlpCollector:
    """Receives spans over OTLP/gRPC (`grpc_endpoint`) and OTLP/HTTP (`http_endpoint`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_TraceServiceServicer_to_server(_TraceService(self.receive), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                collector.receive(pb.ExportTraceServiceRequest.FromString(body))
                out = pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def grpc_endpoint(self) -> str:
        """The OTLP/gRPC endpoint URL (plaintext)."""
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """The OTLP/HTTP base URL (exporters append /v1/traces to OTEL_EXPORTER_OTLP_ENDPOINT)."""
        return f"http://127.0.0.1:{self.http_port}"

    def receive(self, request: pb.ExportTraceServiceRequest) -> None:
        """Keep the spans of one Export request."""
        got = []
        for resource_spans in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(attrs.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    got.append(
                        ReceivedSpan(
                            service=service,
                            name=s.name,
                            kind=KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status_code=s.status.code,
                            events=tuple(e.name for e in s.events),
                        )
                    )
        with self._lock:
            self._spans.extend(got)
            self.requests += 1

    @property
    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in arrival order."""
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], what: str, timeout: float = 60.0
    ) -> list[ReceivedSpan]:
        """Poll until predicate(spans) holds; return the spans. Fails naming `what` after timeout s."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in spans})
                raise AssertionError(f"timed out waiting for {what}; received: {names}")
            time.sleep(0.05)

    def __enter__(self) -> OtlpCollector:
        self._grpc.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(0)
