"""The handles the domain spans yield (telemetry/spans.py): no-ops without a tracer.

A handle writes to its span only while the span records (tracing on, span not ended): after
the end the exporter owns the span, so a late write is dropped, never applied (004 §2.11e).
Content goes through `set_content` only, which drops it unless content was opted into
(004 §2.11c) and cuts it at CONTENT_MAX_CHARS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from agentrt.mesh.telemetry.tracing import content_enabled

#: Longest content attribute recorded, in characters; longer values are cut with a marker.
CONTENT_MAX_CHARS = 16 * 1024

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]


class Span:
    """A domain span handle (see the module docstring); a no-op without a tracer."""

    __slots__ = ("_span",)

    def __init__(self, span: trace.Span | None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        """True while writes reach a span (tracing on, span not ended)."""
        return self._span is not None and self._span.is_recording()

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set one attribute (None is skipped)."""
        if value is not None and self.recording:
            self._span.set_attribute(key, value)  # type: ignore[union-attr]

    def set_many(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        """Set several attributes (None values are skipped)."""
        if self.recording:
            for key, value in attributes.items():
                if value is not None:
                    self._span.set_attribute(key, value)  # type: ignore[union-attr]

    def set_content(self, key: str, value: str) -> None:
        """Set a content attribute (a prompt, an output, arguments): only when opted in (004 §2.11c).

        Values longer than CONTENT_MAX_CHARS are cut, with a marker saying how much was left out.
        """
        if self.recording and content_enabled():
            if len(value) > CONTENT_MAX_CHARS:
                value = value[:CONTENT_MAX_CHARS] + f"…[{len(value) - CONTENT_MAX_CHARS} more characters]"
            self._span.set_attribute(key, value)  # type: ignore[union-attr]

    def event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Add a zero-duration event to the span."""
        if self.recording:
            self._span.add_event(name, dict(attributes or {}))  # type: ignore[union-attr]

    def fail(self, error_type: str, message: str = "") -> None:
        """Mark the span failed: `error.type` (a stable kind or reason) and status ERROR."""
        if self.recording:
            self._span.set_attribute("error.type", error_type)  # type: ignore[union-attr]
            self._span.set_status(Status(StatusCode.ERROR, message or error_type))  # type: ignore[union-attr]


class GenerationSpan(Span):
    """A model call: request model in, response id, model and usage out."""

    __slots__ = ()

    def set_response(
        self,
        *,
        response_id: str = "",
        model: str = "",
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_input_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        finish_reasons: Sequence[str] = (),
    ) -> None:
        """Record the response (ids and usage, never content; tokens as the provider reported)."""
        self.set_many(
            {
                "gen_ai.response.id": response_id or None,
                "gen_ai.response.model": model or None,
                "gen_ai.usage.input_tokens": input_tokens,
                "gen_ai.usage.output_tokens": output_tokens,
                "gen_ai.usage.cache_read.input_tokens": cached_input_tokens,
                "gen_ai.usage.reasoning.output_tokens": reasoning_tokens,
                "gen_ai.response.finish_reasons": list(finish_reasons) or None,
            }
        )


class ToolCallSpan(Span):
    """One tool call: name and call id in, outcome out; arguments and result are content."""

    __slots__ = ()

    def set_result(self, *, is_error: bool, outcome: str = "", replayed: bool = False) -> None:
        """Record the outcome of the call.

        Args:
            is_error: the result the model sees is a failure.
            outcome: e.g. "ok", "error", "timeout", "denied".
            replayed: the tool service's journal answered (the call had run before).
        """
        self.set_many(
            {
                "agentrt.tool.is_error": is_error,
                "agentrt.tool.outcome": outcome or None,
                "agentrt.tool.replayed": replayed,
            }
        )


class SandboxCommandSpan(Span):
    """One command in a sandbox; the command line is content."""

    __slots__ = ()

    def set_exit(
        self,
        *,
        exit_code: int | None,
        timed_out: bool = False,
        output_bytes: int = 0,
        truncated: bool = False,
    ) -> None:
        """Record how the command ended (exit_code None = killed or never started)."""
        self.set_many(
            {
                "process.exit.code": exit_code,
                "agentrt.sandbox.timed_out": timed_out,
                "agentrt.sandbox.output_bytes": output_bytes,
                "agentrt.sandbox.truncated": truncated,
            }
        )
