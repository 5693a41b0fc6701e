"""Live terminal view of a run: one RunEvent in, a few lines of rich output out.

`RunRenderer.show(event)` prints, as they arrive: the run header, phases (002 Run Phases,
non-terminal ones only), each turn, streamed model text, each tool call with its exact
argument string, each result (shortened to `RESULT_PREVIEW_CHARS`), suspensions,
diagnostics, gaps (never hidden, 004 §2.11), the turn contract's events (handoffs, 004
§2.4; child runs of agent tools and their progress, 004 §2.8; guardrail results, 004 §2.6;
a requested stop; disclosed tools), and the terminal outcome with usage. Every line is
meant to read at 80 columns: ids go last, previews are shortened, rich wraps the rest.
It holds no run state beyond what it needs to lay the text out; the caller decides when
the run is over. Every string of an event is the model's, a tool's or a client's, so control
characters in it (ESC, CR, BEL, C1 ...) are shown as escapes (`visible`), never sent to the
terminal: a model cannot clear the screen, retitle the window or rewrite a line it wrote.
"""

from __future__ import annotations

import re

from google.protobuf.message import Message
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text

from agentrt.v1 import common_pb2, run_service_pb2

#: Characters of a tool result shown inline; the rest is elided.
RESULT_PREVIEW_CHARS = 400
#: Characters of tool-call arguments shown inline.
ARGS_PREVIEW_CHARS = 300

_PHASES = {
    common_pb2.RUN_PHASE_PROMPTED: "prompted",
    common_pb2.RUN_PHASE_PLANNING: "planning",
    common_pb2.RUN_PHASE_EXECUTING_TOOLS: "executing tools",
    common_pb2.RUN_PHASE_SYNTHESIZING: "synthesizing",
    common_pb2.RUN_PHASE_COMPLETED: "completed",
    common_pb2.RUN_PHASE_FAILED: "failed",
    common_pb2.RUN_PHASE_CANCELED: "canceled",
}

_STATUSES = {
    common_pb2.RUN_STATUS_RUNNING: "running",
    common_pb2.RUN_STATUS_SUSPENDED: "suspended",
    common_pb2.RUN_STATUS_COMPLETED: "completed",
    common_pb2.RUN_STATUS_FAILED: "failed",
    common_pb2.RUN_STATUS_CANCELED: "canceled",
}

_RESULT_STATUS = {
    common_pb2.TOOL_RESULT_STATUS_OK: ("ok", "green"),
    common_pb2.TOOL_RESULT_STATUS_ERROR: ("error", "red"),
    common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED: ("not executed", "yellow"),
    common_pb2.TOOL_RESULT_STATUS_INTERRUPTED: ("interrupted", "yellow"),
    common_pb2.TOOL_RESULT_STATUS_DENIED: ("denied", "yellow"),
    common_pb2.TOOL_RESULT_STATUS_TIMED_OUT: ("timed out", "red"),
}

_GUARDRAIL_STAGES = {
    run_service_pb2.GUARDRAIL_STAGE_INPUT: "input",
    run_service_pb2.GUARDRAIL_STAGE_OUTPUT: "output",
    run_service_pb2.GUARDRAIL_STAGE_TOOL_INPUT: "tool input",
    run_service_pb2.GUARDRAIL_STAGE_TOOL_OUTPUT: "tool output",
}

_GUARDRAIL_DECISIONS = {
    run_service_pb2.GUARDRAIL_DECISION_ALLOW: ("allowed", "green"),
    run_service_pb2.GUARDRAIL_DECISION_REPLACE: ("replaced", "yellow"),
    run_service_pb2.GUARDRAIL_DECISION_TRIP: ("tripped", "bold red"),
}

_DECISIONS = {
    run_service_pb2.DECISION_KIND_NO_TOOL_CALL: "no tool call",
    run_service_pb2.DECISION_KIND_TRUNCATED: "truncated",
    run_service_pb2.DECISION_KIND_REFUSAL: "refusal",
}


def status_name(status: int) -> str:
    """Return "completed", "failed", ... for a RunStatus value ("unknown" otherwise)."""
    return _STATUSES.get(status, "unknown")  # type: ignore[call-overload]


def phase_name(phase: int) -> str:
    """Return "planning", ... for a RunPhase value ("unknown" otherwise)."""
    return _PHASES.get(phase, "unknown")  # type: ignore[call-overload]


#: Control characters a terminal acts on: C0 but newline and tab, DEL, C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    r"""Return text with every control character but newline and tab written as an escape (ESC -> \x1b)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def visible_message(msg: Message) -> None:
    """Apply `visible` to every string field of msg, nested messages and maps included, in place."""
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            vfield = field.message_type.fields_by_name["value"]
            if vfield.message_type is not None:
                for v in value.values():
                    visible_message(v)
            elif vfield.type == vfield.TYPE_STRING:
                items = {visible(k) if isinstance(k, str) else k: visible(v) for k, v in value.items()}
                value.clear()
                value.update(items)
        elif field.type == field.TYPE_MESSAGE:
            for m in [value] if isinstance(value, Message) else value:
                visible_message(m)
        elif field.type == field.TYPE_STRING:
            if not isinstance(value, str):  # repeated
                cleaned = [visible(v) for v in value]
                del value[:]
                value.extend(cleaned)
            elif _CONTROL.search(value):
                setattr(msg, field.name, visible(value))


def shorten(text: str, limit: int) -> str:
    """Return text cut to `limit` characters with a marker saying how many were dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more chars]"


def usage_line(usage: common_pb2.Usage) -> str:
    """Return e.g. "usage: 1,234 in / 56 out tokens over 3 requests"."""
    line = f"usage: {usage.input_tokens:,} in / {usage.output_tokens:,} out tokens"
    if usage.cached_input_tokens:
        line += f" ({usage.cached_input_tokens:,} cached)"
    if usage.requests:
        line += f" over {usage.requests} request{'s' if usage.requests != 1 else ''}"
    return line


def _indented(text: str, style: str = "") -> Padding:
    """Return text indented two columns, its wrapped lines too (for a line under an event)."""
    return Padding(Text(text, style=style), (0, 0, 0, 2), expand=False)


def _text_of(response: common_pb2.ModelResponse) -> str:
    return "".join(b.text.text for b in response.content if b.WhichOneof("block") == "text")


class RunRenderer:
    """Prints a run's events to a rich Console as they arrive (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._streamed = False  # text of the current response was printed as deltas
        self._midline = False  # the cursor sits after streamed text
        #: call id -> the child agent's name, for agent-tool calls that started a child run
        self._children: dict[str, str] = {}
        #: the agent whose turns these are since the last handoff ("" = the run's own)
        self._agent = ""

    def _endline(self) -> None:
        if self._midline:
            self.console.print()
            self._midline = False

    def show(self, event: run_service_pb2.RunEvent) -> None:
        """Print one event (any payload; unknown payloads are ignored)."""
        kind = event.WhichOneof("payload")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            return
        shown = run_service_pb2.RunEvent()
        shown.CopyFrom(event)
        visible_message(shown)
        event = shown
        if kind != "model_delta":
            self._endline()
        handler(event, getattr(event, kind))

    def _on_run_started(self, event: run_service_pb2.RunEvent, p: run_service_pb2.RunStarted) -> None:
        model = f"{p.model.provider}:{p.model.model}" if p.model.model else p.model.provider
        self.console.print(
            f"[bold]run[/] {escape(event.run_id)} · session {escape(p.session_id)} · "
            f"agent {escape(p.agent_name)} · model {escape(model or 'default')}"
        )

    def _on_phase_changed(self, event: run_service_pb2.RunEvent, p: run_service_pb2.PhaseChanged) -> None:
        self.console.print(f"[dim]· {phase_name(p.phase)}[/]")

    def _on_turn_started(self, event: run_service_pb2.RunEvent, p: run_service_pb2.TurnStarted) -> None:
        self._streamed = False
        agent = f" · {self._agent}" if self._agent else ""
        self.console.rule(f"turn {p.turn or event.turn}{agent}", style="cyan")

    def _on_model_delta(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ModelDelta) -> None:
        if p.text:
            self.console.print(Text(p.text), end="")
            self._streamed = self._midline = True

    def _on_model_responded(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ModelResponded) -> None:
        text = _text_of(p.response)
        if text and not self._streamed:
            self.console.print(Text(text))
        self._streamed = False
        decision = _DECISIONS.get(p.decision)  # type: ignore[call-overload]
        if decision:
            reason = f": {p.reason}" if p.reason else ""
            self.console.print(Text(f"model: {decision}{reason}", style="yellow"))
        u = p.response.usage
        if u.input_tokens or u.output_tokens:
            self.console.print(f"[dim]{u.input_tokens:,} in / {u.output_tokens:,} out tokens[/]")

    def _on_tool_called(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ToolCalled) -> None:
        call = p.call
        args = call.arguments or (f"(not JSON) {call.invalid_arguments}" if call.invalid_arguments else "{}")
        line = Text("→ ", style="bold magenta")
        line.append(call.name, style="bold")
        if p.handoff:
            line.append(" (handoff)", style="magenta")
        line.append(" " + shorten(args, ARGS_PREVIEW_CHARS))
        line.append(f"  [{call.call_id}]", style="dim")
        self.console.print(line)

    def _on_tool_progressed(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ToolProgressed) -> None:
        text = shorten(p.text.rstrip("\n"), RESULT_PREVIEW_CHARS)
        child = self._children.get(p.call_id)
        if child is None:
            self.console.print(Text(text, style="dim"))
            return
        # a child run's progress, indented under its call and marked with its agent
        line = Text(f"  {child} │ ", style="cyan")
        line.append(text.replace("\n", f"\n  {child} │ "), style="dim")
        self.console.print(line)

    def _on_tool_returned(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ToolReturned) -> None:
        r = p.result
        label, color = _RESULT_STATUS.get(
            r.status, ("error" if r.is_error else "ok", "red" if r.is_error else "green")
        )  # type: ignore[call-overload]
        line = Text("← ", style=f"bold {color}")
        line.append(f"{r.name} {label}", style=color)
        if r.exit_code or (r.name == "exec_command" and r.status == common_pb2.TOOL_RESULT_STATUS_OK):
            line.append(f" (exit {r.exit_code})", style=color)
        if r.duration.seconds or r.duration.nanos:
            line.append(f" {r.duration.seconds + r.duration.nanos / 1e9:.2f} s", style="dim")
        if r.output_truncated:
            line.append(" [output truncated]", style="yellow")
        if r.child_run_id:
            line.append(f"  [child run {r.child_run_id}]", style="dim")
        self.console.print(line)
        body = r.summary if not r.content else r.content
        if body.strip():
            self.console.print(Text("  " + shorten(body.strip(), RESULT_PREVIEW_CHARS).replace("\n", "\n  ")))

    def _on_handoff_requested(
        self, event: run_service_pb2.RunEvent, p: run_service_pb2.HandoffRequested
    ) -> None:
        self._agent = p.to_agent
        line = Text("⇒ handoff ", style="bold magenta")
        line.append(f"{p.from_agent} → {p.to_agent}", style="bold")
        if p.to_agent_version:
            line.append(f" v{p.to_agent_version}")
        line.append(f"  [{p.call_id}]", style="dim")
        self.console.print(line)
        if p.arguments.strip() not in ("", "{}"):
            self.console.print(_indented("input " + shorten(p.arguments, ARGS_PREVIEW_CHARS), "magenta"))
        if p.ignored_call_ids:
            n = len(p.ignored_call_ids)
            ignored = f"{n} further handoff call{'s' if n != 1 else ''} ignored (the first wins)"
            self.console.print(_indented(ignored, "dim"))

    def _on_child_run_linked(
        self, event: run_service_pb2.RunEvent, p: run_service_pb2.ChildRunLinked
    ) -> None:
        self._children[p.call_id] = p.agent_name or "child"
        line = Text("↳ child run ", style="bold cyan")
        line.append(p.agent_name or "(agent)", style="bold")
        if p.agent_version:
            line.append(f" v{p.agent_version}")
        line.append(f"  {p.child_run_id}", style="dim")
        line.append(f"  [{p.call_id}]", style="dim")
        self.console.print(line)

    def _on_guardrail_result(
        self, event: run_service_pb2.RunEvent, p: run_service_pb2.GuardrailResult
    ) -> None:
        stage = _GUARDRAIL_STAGES.get(p.stage, "unknown stage")  # type: ignore[call-overload]
        label, color = _GUARDRAIL_DECISIONS.get(p.decision, ("undecided", "red"))  # type: ignore[call-overload]
        line = Text("◆ guardrail ", style=color)
        line.append(p.guardrail, style="bold")
        line.append(f" · {stage}" + (f" ({p.scope})" if p.scope else "") + " · ")
        line.append(label, style=color)
        if p.duration.seconds or p.duration.nanos:
            line.append(f" {(p.duration.seconds + p.duration.nanos / 1e9) * 1000:.0f} ms", style="dim")
        if p.call_id:
            line.append(f"  [{p.call_id}]", style="dim")
        self.console.print(line)
        if p.error:
            self.console.print(_indented("could not decide: " + shorten(p.error, ARGS_PREVIEW_CHARS), "red"))
        elif p.message and p.decision != run_service_pb2.GUARDRAIL_DECISION_ALLOW:
            self.console.print(_indented(shorten(p.message, ARGS_PREVIEW_CHARS), color))

    def _on_stop_requested(self, event: run_service_pb2.RunEvent, p: run_service_pb2.StopRequested) -> None:
        why = f": {p.reason}" if p.reason else ""
        self.console.print(Text(f"· stop requested{why}; the run ends after this turn", style="yellow"))

    def _on_tools_disclosed(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ToolsDisclosed) -> None:
        self.console.print(f"[dim]· tools disclosed: {escape(', '.join(p.names))}[/]")

    def _on_run_suspended(self, event: run_service_pb2.RunEvent, p: run_service_pb2.RunSuspended) -> None:
        names = ", ".join(
            f"{c.call.name} [{c.call.call_id}]" + (f" in child run {c.run_id}" if c.run_id else "")
            for c in p.pending_calls
        )
        self.console.print(Text(f"run suspended, waiting on: {names}", style="bold yellow"))

    def _on_run_resumed(self, event: run_service_pb2.RunEvent, p: run_service_pb2.RunResumed) -> None:
        self.console.print(f"[dim]· resumed with {p.decisions} decision(s)[/]")

    def _on_items_persisted(self, event: run_service_pb2.RunEvent, p: run_service_pb2.ItemsPersisted) -> None:
        self.console.print(f"[dim]· saved {p.entries} session entr{'y' if p.entries == 1 else 'ies'}[/]")

    def _on_diagnostic(self, event: run_service_pb2.RunEvent, p: run_service_pb2.Diagnostic) -> None:
        self.console.print(Text(f"diagnostic {p.code}: {p.message}", style="yellow"))

    def _on_gap(self, event: run_service_pb2.RunEvent, p: run_service_pb2.EventGap) -> None:
        self.console.print(
            Text(
                f"up to {p.dropped} event(s) after seq {p.last_good} cannot be shown (seqs "
                f"skipped{f', next is {p.next}' if p.next else ''}); the run goes on",
                style="bold yellow",
            )
        )

    def _on_run_completed(self, event: run_service_pb2.RunEvent, p: run_service_pb2.RunCompleted) -> None:
        status = status_name(p.status)
        if p.status == common_pb2.RUN_STATUS_COMPLETED:
            self.console.print(
                Panel(Text(p.final_output or "(empty answer)"), title="final answer", border_style="green")
            )
        elif p.status == common_pb2.RUN_STATUS_FAILED:
            f = p.failure
            body = Text(f"{f.kind or 'failed'}: {f.message}")
            if f.reason:
                body.append(f"  (reason {f.reason}{', retryable' if f.retryable else ''})", style="dim")
            self.console.print(Panel(body, title="run failed", border_style="red"))
        else:
            self.console.print(Panel(Text("the run was canceled"), title=status, border_style="yellow"))
        self.console.print(f"[dim]{status} · {p.turns} turn(s) · {usage_line(p.usage)}[/]")

    def _on_stream_end(self, event: run_service_pb2.RunEvent, p: run_service_pb2.StreamEnd) -> None:
        pass
