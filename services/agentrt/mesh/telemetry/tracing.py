"""Whether this process traces, where its spans go, and whether they may carry content.

The process edge (`agentrt serve`) calls `configure_tracing(TracingConfig, service)` once
before it builds its server; `mesh.config.tracing_from_env` is what reads the standard
`OTEL_*` variables into the `TracingConfig`. Library code never reads the environment: the
interceptors (`telemetry/rpc.py`) and the domain spans (`telemetry/spans.py`) ask this module
for the tracer at each call, and get None while tracing is off, which is the default (no
exporter: no span is ever created, so the cost is one attribute read per call).

Invariants:
- One tracer provider per process at a time. `use_tracer_provider` swaps it (the tests, or
  an embedding program with its own provider); `configure_tracing` builds one from a config.
  A program that configured none here but installed an OpenTelemetry SDK provider as the
  global one (`trace.set_tracer_provider`, as OpenTelemetry's own setup does) is traced
  through that one: a program using `agentrt.client` joins its calls to its own traces
  without knowing this module.
- Conversation content (prompts, outputs, tool arguments and results, commands) reaches a
  span only when `record_content` was set (004 §2.11c); ids (run, call, response) always do
  (004 §2.11e), they are not payload.
- `shutdown_tracing` flushes what the batch processor still holds; the edge calls it after
  the drain so the last spans of a stopping process are exported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace

from agentrt import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger("agentrt.telemetry")

#: Exporters a config may name (OTEL_TRACES_EXPORTER values this build implements).
EXPORTERS = ("otlp", "console")
#: OTLP transports (OTEL_EXPORTER_OTLP_PROTOCOL values this build implements).
PROTOCOLS = ("grpc", "http/protobuf")
#: The instrumentation scope every agentrt span is recorded under.
SCOPE = "agentrt"


@dataclass(frozen=True)
class TracingConfig:
    """Where this process's spans go (read at the edge by `mesh.config.tracing_from_env`).

    Attributes:
        exporters: exporter names from EXPORTERS; () = tracing off (the default).
        protocol: the OTLP transport, "grpc" (port 4317) or "http/protobuf" (port 4318).
        endpoint: OTLP endpoint URL; "" lets the exporter read OTEL_EXPORTER_OTLP_ENDPOINT /
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT itself (the standard rules, including the
            `/v1/traces` suffix of HTTP), else its default (localhost).
        service_name: `service.name` of the spans; "" = "agentrt-<service>".
        record_content: conversation content may be recorded on spans (opt-in, 004 §2.11c).
    """

    exporters: tuple[str, ...] = ()
    protocol: str = "grpc"
    endpoint: str = ""
    service_name: str = ""
    record_content: bool = False

    def __post_init__(self) -> None:
        """Check the names.

        Raises:
            ValueError: an exporter or protocol this build does not implement.
        """
        for name in self.exporters:
            if name not in EXPORTERS:
                raise ValueError(f"trace exporter {name!r} is not one of {', '.join(EXPORTERS)} (or none)")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"OTLP protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")

    @property
    def enabled(self) -> bool:
        """True when some exporter is configured."""
        return bool(self.exporters)


@dataclass
class _State:
    provider: TracerProvider | None = None
    tracer: trace.Tracer | None = None
    record_content: bool = False
    owned: bool = False
    #: The global provider a tracer was last made for, and that tracer.
    global_provider: object | None = None
    global_tracer: trace.Tracer | None = None


_state = _State()
_NOT_SET = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def tracer() -> trace.Tracer | None:
    """Return the tracer of this process, or None while tracing is off (see the invariants)."""
    if _state.tracer is not None:
        return _state.tracer
    provider = trace.get_tracer_provider()
    if isinstance(provider, _NOT_SET):
        return None
    if provider is not _state.global_provider:
        _state.global_provider, _state.global_tracer = provider, provider.get_tracer(SCOPE, __version__)
    return _state.global_tracer


def tracing_enabled() -> bool:
    """Return True while spans are recorded."""
    return tracer() is not None


def content_enabled() -> bool:
    """Return True when conversation content may be put on spans (004 §2.11c).

    Never through a global provider installed outside this module: only the config opts in.
    """
    return _state.tracer is not None and _state.record_content


def use_tracer_provider(provider: TracerProvider | None, *, record_content: bool = False) -> None:
    """Trace through `provider` from now on (None = tracing off).

    For tests (an in-memory exporter) and for programs embedding a service with a provider of
    their own; `configure_tracing` is the edge's way. The previous provider is not shut down
    unless `configure_tracing` built it.

    Args:
        provider: an OpenTelemetry SDK TracerProvider, or None.
        record_content: conversation content may be recorded on spans.
    """
    if _state.owned and _state.provider is not None and _state.provider is not provider:
        _state.provider.shutdown()
    _state.provider = provider
    _state.tracer = provider.get_tracer(SCOPE, __version__) if provider is not None else None
    _state.record_content = record_content
    _state.owned = False


def configure_tracing(config: TracingConfig, service: str, *, set_global: bool = False) -> bool:
    """Build the tracer provider a config describes and trace through it; return whether on.

    The SDK reads the rest of the standard variables itself: the sampler
    (OTEL_TRACES_SAMPLER, default parent-based always-on), the batch processor's queue
    (OTEL_BSP_*), the exporter's headers, certificates, timeout and compression
    (OTEL_EXPORTER_OTLP_*), and resource attributes (OTEL_RESOURCE_ATTRIBUTES).

    Args:
        config: the edge's tracing settings; not enabled = tracing off.
        service: "runs", "gateway", ...: names the spans' `service.name` unless the config does.
        set_global: also install the provider as OpenTelemetry's global one (the process
            edge does, so any library using the OpenTelemetry API joins the same traces).
    """
    if not config.enabled:
        use_tracer_provider(None)
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {
            "service.name": config.service_name or f"agentrt-{service}",
            "service.namespace": "agentrt",
            "service.version": __version__,
        }
    )
    provider = TracerProvider(resource=resource)
    for name in config.exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, config)))
    use_tracer_provider(provider, record_content=config.record_content)
    _state.owned = True
    if set_global:
        trace.set_tracer_provider(provider)
    log.info(
        "tracing: %s%s%s",
        ",".join(config.exporters),
        f" over OTLP/{config.protocol}" if "otlp" in config.exporters else "",
        ", with conversation content" if config.record_content else "",
    )
    return True


def _exporter(name: str, config: TracingConfig):  # type: ignore[no-untyped-def]
    """Return the span exporter `name` of a config (imported only when used)."""
    endpoint = config.endpoint or None
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter(endpoint=endpoint)


def shutdown_tracing(timeout_seconds: float = 5.0) -> None:
    """Export what is still queued, then stop tracing (no-op while off).

    Args:
        timeout_seconds: bound of the final flush, in seconds.
    """
    provider, owned = _state.provider, _state.owned
    if provider is None:
        return
    try:
        provider.force_flush(int(timeout_seconds * 1000))
    finally:
        _state.provider = _state.tracer = None
        _state.owned = False
        if owned:
            provider.shutdown()
