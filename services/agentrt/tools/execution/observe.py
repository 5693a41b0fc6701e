"""Spans and metrics of the tool service: one span per tool call, one per sandbox command.

The executor (executor.py) calls `tool_call` around each ExecuteTool request's journal work,
its dispatch (dispatch.py) `sandbox_command` around each exec_command that reaches a
sandbox; both are no-op spans
while the process does not trace (mesh/telemetry), and always count in `ToolMetrics`
(mesh/telemetry/metrics.py: `agentrt_tools_calls_total`, `agentrt_tools_sandbox_commands_*`).

Span shape in the tools process (docs/architecture.md "Observability"):

    ToolService/ExecuteTool (SERVER, the RPC interceptor)
    └─ execute_tool <tool>          gen_ai.tool.call.id, agentrt.tool.outcome, .replayed
       └─ sandbox command           agentrt.sandbox.backend, process.exit.code, .timed_out

The command line is content (004 §2.11c): it is on the span only with
AGENTRT_TRACE_CONTENT; ids (run, call) are always there.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from agentrt.mesh import telemetry
from agentrt.mesh.telemetry.metrics import ToolMetrics
from agentrt.tools.calls.results import Outcome, ResultStatus
from agentrt.tools.sandbox.spec import CallerDeadline


def call_outcome(outcome: Outcome, replayed: bool) -> str:
    """Return the `outcome` label of a tool call: "replayed", "error" or "ok"."""
    if replayed:
        return "replayed"
    return "error" if outcome.is_error else "ok"


def command_outcome(outcome: Outcome) -> str:
    """Return the `outcome` label of a sandbox command.

    "timeout" (its timeout killed it), "refused" (a policy or its arguments: nothing ran),
    "interrupted" (stopped by StopSandbox), else "exit_zero" / "exit_nonzero".
    """
    if outcome.status == ResultStatus.TIMED_OUT:
        return "timeout"
    if "exit_code" not in outcome.details and outcome.is_error:
        return "refused"  # decided before anything ran (no exit code)
    if outcome.status == ResultStatus.ERROR and outcome.summary.startswith("killed"):
        return "interrupted"
    return "exit_zero" if outcome.exit_code == 0 else "exit_nonzero"


class ToolObserver:
    """Records the tool service's spans and series (see the module docstring)."""

    def __init__(self, metrics: ToolMetrics | None = None) -> None:
        """Count into metrics (a private ToolMetrics when None)."""
        self.metrics = metrics if metrics is not None else ToolMetrics()

    @asynccontextmanager
    async def tool_call(
        self, run_id: str, tool: str, call_id: str, arguments: str = ""
    ) -> AsyncIterator[ToolCallRecord]:
        """Open the span of one tool call (run id bound for the logs); yield a recorder.

        The arguments are content: on the span only when opted in (004 §2.11c).

        The body calls `recorder.done(outcome, replayed)` once it has the answer; a body
        that raises leaves the span failed and counts nothing.
        """
        with telemetry.bind_run(run_id), telemetry.tool_call_span(tool, call_id) as span:
            if arguments:
                span.set_content("gen_ai.tool.call.arguments", arguments)
            yield ToolCallRecord(self.metrics, span, tool)

    async def sandbox_command(
        self,
        *,
        backend: str,
        call_id: str,
        cmd: str,
        run: Callable[[], Awaitable[Outcome]],
        shell: str = "",
    ) -> Outcome:
        """Run one sandbox command (`run`) inside its span, and count it.

        Args:
            backend: "bwrap", "unconfined" or "docker" (the runner's mode).
            call_id: the tool call it serves.
            cmd: the command line (content: on the span only when opted in).
            run: runs the command and returns its outcome.
            shell: the named shell it ran in ("" = a fresh one).

        Raises:
            Whatever `run` raises (CallerDeadline counts as "interrupted").
        """
        metrics = self.metrics
        started = time.monotonic()
        running = metrics.sandbox_commands_running.labels(backend)
        running.inc()
        label = "interrupted"
        try:
            with telemetry.sandbox_command_span(backend=backend, call_id=call_id, shell=shell) as span:
                span.set_content("agentrt.sandbox.command", cmd)
                try:
                    outcome = await run()
                except CallerDeadline:
                    span.set_exit(exit_code=None, timed_out=False)
                    raise
                label = command_outcome(outcome)
                span.set_exit(
                    exit_code=outcome.details.get(
                        "exit_code", outcome.exit_code if label != "refused" else None
                    ),
                    timed_out=label == "timeout",
                    output_bytes=int(outcome.details.get("output_bytes", 0) or 0),
                    truncated=outcome.output_truncated,
                )
                span.set("agentrt.sandbox.outcome", label)
                return outcome
        finally:
            running.dec()
            metrics.sandbox_commands.labels(backend, label).inc()
            metrics.sandbox_command_duration.labels(backend).observe(time.monotonic() - started)

    def refused_command(self, backend: str) -> None:
        """Count an exec_command refused before it reached a sandbox (policy, arguments)."""
        self.metrics.sandbox_commands.labels(backend, "refused").inc()

    def unavailable_command(self, backend: str) -> None:
        """Count an exec_command refused because the sandbox is unavailable."""
        self.metrics.sandbox_commands.labels(backend, "unavailable").inc()


class ToolCallRecord:
    """What `ToolObserver.tool_call` yields: records the call's answer on span and series."""

    __slots__ = ("_metrics", "_span", "_tool")

    def __init__(self, metrics: ToolMetrics, span: telemetry.ToolCallSpan, tool: str) -> None:
        self._metrics, self._span, self._tool = metrics, span, tool

    def done(self, outcome: Outcome, replayed: bool) -> None:
        """Record the answer the request got (replayed: from the journal or another request)."""
        label = call_outcome(outcome, replayed)
        self._metrics.tool_calls.labels(self._tool, label).inc()
        self._span.set_result(is_error=outcome.is_error, outcome=str(outcome.status), replayed=replayed)
        self._span.set_content("gen_ai.tool.call.result", outcome.content)
