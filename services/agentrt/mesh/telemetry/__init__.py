"""Observability shared by every service: spans, RPC tracing and metrics, structured logs.

The rooms (each module's docstring has its contract):
- `tracing`: whether the process traces and where spans go (`configure_tracing`, set up by
  the process edge from the standard OTEL_* variables; off by default).
- `spans`: the domain spans of a run (004 §2.11e) and the run/turn context, with the
  handles they yield (`handles`); re-exported here, since it is what a service's domain
  code calls. No grpc import.
- `rpc`: the grpc.aio interceptors that trace every hop and count every call
  (installed by `mesh.server.MeshServer` and `client.channels.open_channel`).
- `metrics`: the Prometheus series (RPC and domain) and the /metrics endpoint.
- `logs`: text or JSON log lines carrying service, run id, turn, trace and span ids.

Domain code uses it like this (the span is the current one inside the block, so the gRPC
calls made there are its children, in this process and the next):

    from agentrt.mesh import telemetry

    with telemetry.turn_span(n):
        with telemetry.generation_span(provider=ref.provider, model=ref.model) as gen:
            answer = await call_the_gateway(...)
            gen.set_response(response_id=answer.id, input_tokens=..., output_tokens=...)
"""

from agentrt.mesh.telemetry.handles import (
    CONTENT_MAX_CHARS,
    GenerationSpan,
    SandboxCommandSpan,
    Span,
    ToolCallSpan,
)
from agentrt.mesh.telemetry.spans import (
    bind_run,
    compaction_span,
    current_run_id,
    current_turn,
    generation_span,
    guardrail_span,
    handoff_span,
    provider_call_span,
    record_model_retry,
    remote_parent,
    run_span,
    sandbox_command_span,
    tool_call_span,
    traceparent,
    turn_span,
)
from agentrt.mesh.telemetry.tracing import (
    TracingConfig,
    configure_tracing,
    content_enabled,
    shutdown_tracing,
    tracing_enabled,
    use_tracer_provider,
)

__all__ = [
    "CONTENT_MAX_CHARS",
    "GenerationSpan",
    "SandboxCommandSpan",
    "Span",
    "ToolCallSpan",
    "TracingConfig",
    "bind_run",
    "compaction_span",
    "configure_tracing",
    "content_enabled",
    "current_run_id",
    "current_turn",
    "generation_span",
    "guardrail_span",
    "handoff_span",
    "provider_call_span",
    "record_model_retry",
    "remote_parent",
    "run_span",
    "sandbox_command_span",
    "shutdown_tracing",
    "tool_call_span",
    "traceparent",
    "tracing_enabled",
    "turn_span",
    "use_tracer_provider",
]
