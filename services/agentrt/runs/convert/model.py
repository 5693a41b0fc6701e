"""Between the contracts' protos and the pure core: responses, history, messages, calls.

- `response_in`: a gateway ModelResponse -> core `Response` (the raw argument text of
  each call is recovered exactly, including out-of-band invalid arguments).
- `history_of`: session context entries -> core history (`UserTurn` / `Step` /
  `Summary`), grouping a turn's entries by (run_id, turn) and reading the recorded
  decision from the assistant entry's display (`extra_json["decision"]`, `["reason"]`).
  A compaction checkpoint becomes its summary; a stored result whose call is not in the
  view is never sent (a provider would refuse it, or read a result of nothing).
- `units_of` / `evidence_of`: the same entries as compaction plans over them and as the
  summary model reads them (core.compaction).
- `messages_out`: core messages -> proto Messages for the gateway.

Entry shapes the run loop writes (and this module reads) are documented in
docs/services/runs.md.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentrt.core import compaction, render
from agentrt.core.decide import (
    STOP_CONTEXT_WINDOW_EXCEEDED,
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_REFUSAL,
    STOP_TOOL_USE,
    Call,
    DecisionKind,
    ProposedCall,
    Response,
    compose_reason,
)
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

if TYPE_CHECKING:
    from agentrt.runs.storage.records import RunRecord

_STOPS = {
    cpb.STOP_REASON_TOOL_USE: STOP_TOOL_USE,
    cpb.STOP_REASON_END_TURN: STOP_END_TURN,
    cpb.STOP_REASON_MAX_TOKENS: STOP_MAX_TOKENS,
    cpb.STOP_REASON_REFUSAL: STOP_REFUSAL,
    cpb.STOP_REASON_CONTEXT_WINDOW_EXCEEDED: STOP_CONTEXT_WINDOW_EXCEEDED,
}
_KINDS = {
    DecisionKind.TOOL_CALLS: pb.DECISION_KIND_TOOL_CALLS,
    DecisionKind.FINAL: pb.DECISION_KIND_FINAL,
    DecisionKind.NO_TOOL_CALL: pb.DECISION_KIND_NO_TOOL_CALL,
    DecisionKind.TRUNCATED: pb.DECISION_KIND_TRUNCATED,
    DecisionKind.REFUSAL: pb.DECISION_KIND_REFUSAL,
}


def kind_out(kind: DecisionKind) -> int:
    """Return the proto DecisionKind of a core decision kind."""
    return _KINDS[kind]


def text_of(blocks: object) -> str:
    """Return the text blocks of a block list joined by newlines."""
    return "\n".join(b.text.text for b in blocks if b.WhichOneof("block") == "text")  # type: ignore[attr-defined]


def preserved_of(blocks: object) -> list[cpb.ContentBlock]:
    """Return the blocks replayed verbatim (thinking, raw provider blocks), in order."""
    return [b for b in blocks if b.WhichOneof("block") in ("thinking", "raw")]  # type: ignore[attr-defined]


def raw_arguments(call: cpb.ToolCall) -> str | bytes:
    """Return a call's argument text exactly as the model produced it."""
    if call.invalid_arguments:
        if call.invalid_arguments_base64:
            return base64.b64decode(call.invalid_arguments)
        return call.invalid_arguments
    return call.arguments


def response_in(resp: cpb.ModelResponse) -> Response:
    """Read a gateway response as the core decides on it."""
    calls = [
        ProposedCall(
            b.tool_use.name, raw_arguments(b.tool_use), b.tool_use.provider_call_id or b.tool_use.call_id
        )
        for b in resp.content
        if b.WhichOneof("block") == "tool_use"
    ]
    return Response(text_of(resp.content), calls, _STOPS.get(resp.stop_reason, ""), resp.refusal)


def call_out(call: Call) -> cpb.ToolCall:
    """Return the proto ToolCall of a recorded call (arguments exact, or out of band)."""
    return cpb.ToolCall(
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
        invalid_arguments=call.invalid_arguments,
        invalid_arguments_base64=call.invalid_base64,
        provider_call_id=call.provider_call_id,
        index=call.index,
    )


def call_in(call: cpb.ToolCall) -> Call:
    """Return the core Call of a stored proto ToolCall."""
    return Call(
        call.index,
        call.call_id,
        call.name,
        call.arguments,
        call.invalid_arguments,
        call.invalid_arguments_base64,
        call.provider_call_id,
    )


def display_extra(entry: spb.Entry) -> dict[str, object]:
    """Return the entry's display.extra_json as a dict ({} when absent or malformed)."""
    if not entry.HasField("display") or not entry.display.extra_json:
        return {}
    try:
        value = json.loads(entry.display.extra_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class _StepBuilder:
    text: str = ""
    kind: str = ""
    reason: str | None = None
    preserved: list[cpb.ContentBlock] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    results: dict[str, render.Observation] = field(default_factory=dict)

    def build(self) -> render.Step:
        if self.calls:
            kind = DecisionKind.TOOL_CALLS
        else:
            try:
                kind = DecisionKind(self.kind) if self.kind else DecisionKind.FINAL
            except ValueError:
                kind = DecisionKind.FINAL
        reason = self.reason if self.reason is not None else compose_reason(self.text)
        final = self.text if kind in (DecisionKind.FINAL, DecisionKind.REFUSAL) else ""
        return render.Step(kind, reason, final, tuple(self.calls), dict(self.results), tuple(self.preserved))


def history_of(entries: list[spb.Entry]) -> list[render.UserTurn | render.Step | render.Summary]:
    """Group session context entries into the core history, in order.

    A user message is a UserTurn; an assistant message, tool_call and tool_result entries
    sharing (run_id, turn) form one Step (a result joins the step of its call; a result
    whose call is not in the view is left out). A compaction checkpoint is a Summary.
    Entries of other kinds, system messages and empty user messages are left out.
    """
    out: list[render.UserTurn | render.Summary | _StepBuilder] = []
    by_turn: dict[tuple[str, int], _StepBuilder] = {}
    by_call: dict[str, _StepBuilder] = {}
    last: _StepBuilder | None = None

    def builder(entry: spb.Entry) -> _StepBuilder:
        nonlocal last
        key = (entry.run_id, entry.turn)
        if entry.run_id and key in by_turn:
            return by_turn[key]
        if not entry.run_id and last is not None and entry.item.HasField("tool_call"):
            return last
        b = _StepBuilder()
        if entry.run_id:
            by_turn[key] = b
        out.append(b)
        last = b
        return b

    for entry in entries:
        if entry.kind == "compaction":
            if entry.summary.strip():
                out.append(render.Summary(compaction.SUMMARY_PREFIX + entry.summary.strip()))
            continue
        if entry.kind != "item" or not entry.HasField("item"):
            continue
        item = entry.item
        if item.HasField("message"):
            msg = item.message
            if msg.role == cpb.ROLE_USER:
                text = text_of(msg.content)
                if text:
                    out.append(render.UserTurn(text))
                    last = None
            elif msg.role == cpb.ROLE_ASSISTANT:
                b = builder(entry)
                extra = display_extra(entry)
                b.text = text_of(msg.content)
                b.preserved = preserved_of(msg.content)
                b.kind = str(extra.get("decision", ""))
                reason = extra.get("reason")
                b.reason = reason if isinstance(reason, str) else None
        elif item.HasField("tool_call"):
            b = builder(entry)
            b.calls.append(call_in(item.tool_call))
            by_call[item.tool_call.call_id] = b
        elif item.HasField("tool_result"):
            res = item.tool_result
            owner = by_call.get(res.call_id)
            if owner is None:
                continue  # a result of no call in the view: never sent to a provider
            owner.results[res.call_id] = render.Observation(
                res.content, res.is_error, res.summary, res.status == cpb.TOOL_RESULT_STATUS_INTERRUPTED
            )
    return [h.build() if isinstance(h, _StepBuilder) else h for h in out]


def units_of(entries: list[spb.Entry]) -> list[compaction.Unit]:
    """Return the context view as compaction plans over it (core.compaction.Unit), in order.

    A step's entries share (run_id, turn); an entry written without a run id opens a step
    of its own when it is an assistant message, and a tool call without one joins the
    step before it (as history_of groups them).
    """
    out: list[compaction.Unit] = []
    anon = ""
    for entry in entries:
        if entry.kind == "compaction":
            out.append(
                compaction.Unit(entry.entry_id, compaction.CHECKPOINT, size_bytes=len(entry.summary.encode()))
            )
            continue
        if entry.kind != "item" or not entry.HasField("item"):
            out.append(compaction.Unit(entry.entry_id, compaction.OTHER, size_bytes=entry.ByteSize()))
            continue
        item = entry.item
        size = item.ByteSize()
        if item.HasField("message") and item.message.role != cpb.ROLE_ASSISTANT:
            out.append(compaction.Unit(entry.entry_id, compaction.USER, size_bytes=size))
            continue
        if entry.run_id:
            group = f"{entry.run_id}/{entry.turn}"
        else:
            if item.HasField("message") or not anon:
                anon = f"entry:{entry.entry_id}"
            group = anon
        call_id = ""
        if item.HasField("tool_call"):
            call_id = item.tool_call.call_id
        elif item.HasField("tool_result"):
            call_id = item.tool_result.call_id
        out.append(
            compaction.Unit(
                entry.entry_id,
                compaction.STEP,
                group=group,
                call_id=call_id,
                is_result=item.HasField("tool_result"),
                size_bytes=size,
            )
        )
    return out


def evidence_of(entries: list[spb.Entry]) -> list[dict[str, object]]:
    """Return folded entries as the quoted records the summary model reads (002 Evidence)."""
    out: list[dict[str, object]] = []
    for entry in entries:
        if entry.kind != "item" or not entry.HasField("item"):
            continue
        item = entry.item
        if item.HasField("message"):
            role = {cpb.ROLE_USER: "user", cpb.ROLE_ASSISTANT: "assistant", cpb.ROLE_SYSTEM: "system"}.get(
                item.message.role, "user"
            )
            text = text_of(item.message.content)
            if text:
                out.append({"role": role, "text": text})
        elif item.HasField("tool_call"):
            call = item.tool_call
            out.append(
                {
                    "tool_call": {
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments or call.invalid_arguments,
                    }
                }
            )
        elif item.HasField("tool_result"):
            res = item.tool_result
            out.append(
                {
                    "tool_result": {
                        "call_id": res.call_id,
                        "name": res.name,
                        "is_error": res.is_error,
                        "content": res.content,
                    }
                }
            )
    return out


def messages_out(messages: list[render.Message]) -> list[cpb.Message]:
    """Return the proto Messages of rendered core messages."""
    out = []
    for m in messages:
        role = {render.ROLE_USER: cpb.ROLE_USER, render.ROLE_SYSTEM: cpb.ROLE_SYSTEM}.get(
            m.role, cpb.ROLE_ASSISTANT
        )
        blocks = []
        for b in m.blocks:
            if isinstance(b, render.TextBlock):
                blocks.append(cpb.ContentBlock(text=cpb.TextBlock(text=b.text)))
            elif isinstance(b, render.ToolUseBlock):
                blocks.append(
                    cpb.ContentBlock(
                        tool_use=cpb.ToolCall(call_id=b.call_id, name=b.name, arguments=b.input_json)
                    )
                )
            elif isinstance(b, render.ToolResultBlock):
                blocks.append(
                    cpb.ContentBlock(
                        tool_result=cpb.ToolResult(
                            call_id=b.call_id, name=b.name, content=b.content, is_error=b.is_error
                        )
                    )
                )
            elif isinstance(b.value, cpb.ContentBlock):
                blocks.append(b.value)
        out.append(cpb.Message(role=role, content=blocks))
    return out


_INJECTION_KINDS = {
    "steer": pb.INJECTION_KIND_STEER,
    "next_turn": pb.INJECTION_KIND_NEXT_TURN,
    "follow_up": pb.INJECTION_KIND_FOLLOW_UP,
}


#: The queue kind of a StopAfterTurn request (runs/loop/stopping_phase.py): it rides on the
#: run's input queue so the save point that reads queued input reads it too, whichever
#: replica owns the run; it is not input, so it is never shown or reported as such.
STOP_KIND = "stop"


def injected_only(items: list[dict[str, object]]) -> list[dict[str, object]]:
    """Return the queued items that are injected input (StopAfterTurn requests left out)."""
    return [i for i in items if i.get("kind") != STOP_KIND]


def injected_out(item: dict[str, object]) -> pb.InjectedInput:
    """Return the proto InjectedInput of a queued input ({"id", "kind", "text"})."""
    return pb.InjectedInput(
        id=str(item.get("id", "")),
        kind=_INJECTION_KINDS.get(str(item.get("kind", "")), pb.INJECTION_KIND_UNSPECIFIED),  # type: ignore[arg-type]
        text=str(item.get("text", "")),
    )


def run_out(r: RunRecord) -> pb.Run:
    """Return the proto Run of a run record."""
    run = pb.Run(
        run_id=r.run_id,
        session_id=r.session_id,
        agent_name=r.agent_name,
        agent_version=r.agent_version,
        status=r.status,  # type: ignore[arg-type]
        phase=r.phase,  # type: ignore[arg-type]
        turns=r.turns,
        usage=r.usage,
        final_output=r.final_output,
        pending_calls=r.pending,
        labels=r.labels,
        workspace=r.workspace,
        suspension_reason=r.suspension_reason,  # type: ignore[arg-type]
        pending_input=[injected_out(i) for i in injected_only(r.pending_input)],
        stop_requested=any(i.get("kind") == STOP_KIND for i in r.pending_input)
        or "stopped_output" in r.state,
        diagnostics=r.diagnostics(),
        overflow_retries=r.overflow_retries,
    )
    if r.failure is not None:
        run.failure.CopyFrom(r.failure)
    disclosed = r.state.get("disclosure")  # runs/loop/disclosure_phase.py
    if disclosed:
        run.disclosed_tools.extend(json.loads(str(disclosed)).get("disclosed", []))
    # agents as tools (runs/loop/child_phase.py): the parent link, the children, nested usage
    run.parent_run_id = str(r.state.get("parent_run_id", ""))
    run.parent_call_id = str(r.state.get("parent_call_id", ""))
    run.child_run_ids.extend(str(x) for x in r.state.get("child_run_ids", []))
    nested = r.state.get("nested_usage")
    if isinstance(nested, dict):
        run.nested_usage.CopyFrom(cpb.Usage(**{k: int(v) for k, v in nested.items()}))
    run.sandbox_id = str(r.state.get("sandbox_id", ""))  # runs/sandboxes.py
    current = r.state.get("agent")  # the last handoff's target (runs/loop/handoff_phase.py)
    if current:
        snap = pb.AgentSpec.FromString(base64.b64decode(current))
        run.current_agent_name, run.current_agent_version = snap.name, snap.version
    run.create_time.FromNanoseconds(int(r.create_time_s * 1e9))
    run.update_time.FromNanoseconds(int(r.update_time_s * 1e9))
    return run
