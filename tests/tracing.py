"""Tracing into memory for tests: the SDK's InMemorySpanExporter behind `use_tracer_provider`.

`recorded()` is a context manager (and `spans` fixture body) that traces the current process
into memory, every span exported at its end, and turns tracing off again afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt.mesh.telemetry import use_tracer_provider


class Recorded:
    """The spans finished while recording."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self._exporter.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans if s.name == name]
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.spans]}"
        return found[0]

    def clear(self) -> None:
        self._exporter.clear()


@contextmanager
def recorded(*, content: bool = False) -> Iterator[Recorded]:
    """Trace into memory for the body (content: conversation content may be recorded)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider, record_content=content)
    try:
        yield Recorded(exporter)
    finally:
        use_tracer_provider(None)
        provider.shutdown()
