"""The domain spans of a run (004 §2.11e) and the run/turn context logs carry.

Each `*_span` function is a context manager yielding a handle that works whether or not
tracing is on: without a tracer it records nothing and costs a few attribute checks, so a
call site never branches ("a usable no-op handle without a trace"). The span it opens is
the current one for the body, so anything called inside — a gRPC call through
`open_channel`, a nested domain span — becomes its child; the parent travels on the
context (contextvars), never through signatures.

Shape (docs/architecture.md "Observability"):

    run  (invoke_agent <agent>)                    runs
    └─ turn <n>                                    runs
       ├─ generation (chat <model>)                runs      └─ StreamGenerate RPC → gateway
       │     └─ provider call (chat <model>, CLIENT) gateway
       │     model retries: events on the span that retried
       ├─ tool call (execute_tool <tool>)          runs      └─ ExecuteTool RPC → tools
       │     └─ sandbox command                    tools
       ├─ guardrail <name>, handoff, compaction    runs
       └─ session RPCs (GetContext, AppendEntries) → sessions

Names and attributes follow the OpenTelemetry GenAI semantic conventions where they exist
(`gen_ai.*`), `agentrt.*` otherwise. Ids that join a span to what it produced (run id, call
id, response id) are always recorded; conversation content only through `set_content`,
which drops it unless content was opted into (004 §2.11c). A handle (telemetry/handles.py)
ignores writes after its span ended (the exporter owns a finished span).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrt.mesh.telemetry.handles import (
    AttributeValue,
    GenerationSpan,
    SandboxCommandSpan,
    Span,
    ToolCallSpan,
)
from agentrt.mesh.telemetry.tracing import tracer

_run_id: contextvars.ContextVar[str] = contextvars.ContextVar("agentrt_run_id", default="")
_turn: contextvars.ContextVar[int] = contextvars.ContextVar("agentrt_turn", default=0)
_W3C = TraceContextTextMapPropagator()


def current_run_id() -> str:
    """Return the run id bound to the current context ("" when none)."""
    return _run_id.get()


def current_turn() -> int:
    """Return the turn number bound to the current context (0 when none)."""
    return _turn.get()


@contextmanager
def bind_run(run_id: str, turn: int | None = None) -> Iterator[None]:
    """Bind a run id (and a turn) to the context for the body, without a span.

    For code that works for a run but opens no span of its own (a service answering a call
    made for a run), so its log records carry the run id.
    """
    run_token = _run_id.set(run_id)
    turn_token = _turn.set(turn) if turn is not None else None
    try:
        yield
    finally:
        if turn_token is not None:
            _turn.reset(turn_token)
        _run_id.reset(run_token)


@contextmanager
def _domain_span(
    name: str,
    attributes: Mapping[str, AttributeValue | None],
    handle: type[Span] = Span,
    *,
    run_id: str | None = None,
    turn: int | None = None,
    parent: str = "",
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Any]:
    """Open a span as the current one for the body; bind run id and turn for the logs.

    An exception leaving the body marks the span failed (error.type = the exception's
    class) and is re-raised; a cancellation is recorded as an event, not as an error.
    """
    run_token = _run_id.set(run_id) if run_id else None
    turn_token = _turn.set(turn) if turn is not None else None
    active = tracer()
    span: trace.Span | None = None
    attach_token = None
    if active is not None:
        parent_context = remote_parent(parent) if parent else None
        links = _link_to_current() if parent_context is not None else None
        span = active.start_span(
            name,
            context=parent_context,
            kind=kind,
            attributes={k: v for k, v in attributes.items() if v is not None},
            links=links,
        )
        attach_token = otel_context.attach(trace.set_span_in_context(span, parent_context))
    try:
        yield handle(span)
    except Exception as exc:
        if span is not None and span.is_recording():
            span.record_exception(exc)
            status = getattr(span, "status", None)
            if status is None or status.status_code != StatusCode.ERROR:
                span.set_attribute("error.type", type(exc).__name__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    except BaseException:  # asyncio.CancelledError, GeneratorExit: stopped, not failed
        if span is not None:
            span.add_event("canceled")
        raise
    finally:
        if span is not None:
            span.end()
        if attach_token is not None:
            otel_context.detach(attach_token)
        if turn_token is not None:
            _turn.reset(turn_token)
        if run_token is not None:
            _run_id.reset(run_token)


def _link_to_current() -> list[Link] | None:
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else None


def run_span(
    run_id: str,
    *,
    agent: str,
    agent_version: int | None = None,
    session_id: str = "",
    tenant: str = "",
    parent: str = "",
) -> Any:
    """Open the span of a run's execution (one segment: start or resume to suspend or end).

    Args:
        run_id: the run.
        agent: the agent's name (`gen_ai.agent.name`); the span is "invoke_agent <agent>".
        agent_version: the registered version, when the agent is registered.
        session_id: the session (`gen_ai.conversation.id`).
        tenant: the run's tenant.
        parent: a W3C traceparent stored with the run (`traceparent()` of the first
            segment), so a resumed or taken-over run continues the same trace; the span
            currently open (e.g. ResumeRun's) is then linked, not the parent. "" = the
            current span is the parent.

    Yields:
        A Span; `fail(kind, message)` for a failed run, `set("agentrt.run.status", ...)`.
    """
    return _domain_span(
        f"invoke_agent {agent}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.agent.version": str(agent_version) if agent_version else None,
            "gen_ai.conversation.id": session_id or None,
            "agentrt.run.id": run_id,
            "agentrt.tenant": tenant or None,
        },
        run_id=run_id,
        parent=parent,
    )


def turn_span(turn: int, *, run_id: str | None = None) -> Any:
    """Open the span of turn `turn` (1-based) of the current run; binds the turn for the logs."""
    return _domain_span(
        f"turn {turn}",
        {"agentrt.run.id": run_id or current_run_id() or None, "agentrt.turn": turn},
        run_id=run_id,
        turn=turn,
    )


def generation_span(
    *, provider: str, model: str, max_tokens: int | None = None, temperature: float | None = None
) -> Any:
    """Open the span of one model call ("chat <model>"); the gateway RPC and retries nest under it.

    Yields:
        A GenerationSpan: `set_response(...)` with the response id, model and usage;
        `set_content("gen_ai.input.messages" / "gen_ai.output.messages", json)` when opted in.
    """
    return _domain_span(
        f"chat {model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.request.temperature": temperature,
            "agentrt.run.id": current_run_id() or None,
            "agentrt.turn": current_turn() or None,
        },
        GenerationSpan,
    )


def provider_call_span(*, provider: str, model: str, rpc: str, run_id: str = "") -> Any:
    """Open the gateway's CLIENT span of one call to a provider ("chat <model>", 004 §2.11e).

    One span for the call, its retries included: each retry is a `model_retry` event on it
    (`record_model_retry`), not a span of its own. Opened inside the gateway's RPC server
    span, so it is that span's child and the run's generation span's grandchild.

    Args:
        provider: the provider key ("openai", "anthropic", "local", ...), `gen_ai.provider.name`.
        model: the resolved model id, `gen_ai.request.model`.
        rpc: "Generate" or "StreamGenerate" (`agentrt.gateway.rpc`).
        run_id: the run the call is for (the request's run_id), bound for the logs too.

    Yields:
        A GenerationSpan: `set_response(...)` with the response id, model and usage; a failed
        call is marked by `fail(reason)` (the stable reason, e.g. "rate_limited").
    """
    return _domain_span(
        f"chat {model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "agentrt.gateway.rpc": rpc,
            "agentrt.run.id": run_id or current_run_id() or None,
        },
        GenerationSpan,
        run_id=run_id or None,
        kind=SpanKind.CLIENT,
    )


def tool_call_span(tool: str, call_id: str, *, tool_type: str = "function") -> Any:
    """Open the span of one tool call ("execute_tool <tool>"); the tool RPC nests under it.

    Args:
        tool: the tool's name.
        call_id: the model's call id (`gen_ai.tool.call.id`), recorded always.
        tool_type: "function" (built-in or client tools) or "extension".

    Yields:
        A ToolCallSpan: `set_result(...)`; `set_content("gen_ai.tool.call.arguments" /
        "gen_ai.tool.call.result", text)` when opted in.
    """
    return _domain_span(
        f"execute_tool {tool}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": tool_type,
            "agentrt.run.id": current_run_id() or None,
            "agentrt.turn": current_turn() or None,
        },
        ToolCallSpan,
    )


def sandbox_command_span(
    *, backend: str, run_id: str = "", call_id: str = "", sandbox_id: str = "", shell: str = ""
) -> Any:
    """Open the span of one sandbox command (at the tool layer, whatever the backend).

    Args:
        backend: "bwrap", "unconfined" or "docker".
        run_id: the run the command is for (bound for the logs too); "" when unknown.
        call_id: the tool call that caused it.
        sandbox_id: the sandbox, when the command ran in a named one.
        shell: the persistent shell's name, when it ran in one.

    Yields:
        A SandboxCommandSpan: `set_exit(...)`; `set_content("agentrt.sandbox.command", cmd)`.
    """
    return _domain_span(
        "sandbox command",
        {
            "agentrt.sandbox.backend": backend,
            "agentrt.run.id": run_id or current_run_id() or None,
            "gen_ai.tool.call.id": call_id or None,
            "agentrt.sandbox.id": sandbox_id or None,
            "agentrt.sandbox.shell": shell or None,
        },
        SandboxCommandSpan,
        run_id=run_id or None,
    )


def guardrail_span(name: str, *, kind: str) -> Any:
    """Open the span of one guardrail check; kind "input", "output" or "tool".

    Yields:
        A Span: `set("agentrt.guardrail.tripped", bool)`.
    """
    return _domain_span(
        f"guardrail {name}",
        {
            "agentrt.guardrail.name": name,
            "agentrt.guardrail.kind": kind,
            "agentrt.run.id": current_run_id() or None,
        },
    )


def handoff_span(from_agent: str, to_agent: str, *, call_id: str = "") -> Any:
    """Open the span of a handoff from one agent to another (the handoff's call id joins it)."""
    return _domain_span(
        f"handoff {to_agent}",
        {
            "agentrt.handoff.from_agent": from_agent,
            "agentrt.handoff.to_agent": to_agent,
            "gen_ai.tool.call.id": call_id or None,
            "agentrt.run.id": current_run_id() or None,
        },
    )


def compaction_span(session_id: str, *, entries_before: int | None = None) -> Any:
    """Open the span of a compaction pass over a session's history.

    Yields:
        A Span: `set("agentrt.compaction.entries_after", n)`, `fail("gave_up")`.
    """
    return _domain_span(
        "compaction",
        {
            "gen_ai.conversation.id": session_id or None,
            "agentrt.compaction.entries_before": entries_before,
            "agentrt.run.id": current_run_id() or None,
        },
    )


def record_model_retry(*, attempt: int, reason: str, delay_seconds: float) -> None:
    """Record a model retry as a zero-duration event on the current span (004 §2.11e).

    The marker says that an attempt failed and another follows; the span that retried (the
    generation, or the gateway's RPC) keeps its own duration.

    Args:
        attempt: the attempt that failed, 1-based.
        reason: its stable reason, e.g. "rate_limited".
        delay_seconds: the wait before the next attempt, in seconds.
    """
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(
            "model_retry",
            {
                "agentrt.retry.attempt": attempt,
                "error.type": reason,
                "agentrt.retry.delay_seconds": delay_seconds,
            },
        )


def traceparent() -> str:
    """Return the current span as a W3C traceparent ("" when none), to store with a run."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent", "")


def remote_parent(value: str) -> otel_context.Context | None:
    """Return a context whose parent is the span a W3C traceparent names (None if malformed)."""
    ctx = _W3C.extract({"traceparent": value})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None
