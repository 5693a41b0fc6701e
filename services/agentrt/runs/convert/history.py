"""Session context entries -> the core's history, compaction units and evidence (seed 000, 004 §2.5f).

- `history_of`: session context entries -> core history (`UserTurn` / `Step` /
  `Summary`), grouping a turn's entries by (run_id, turn) and reading the recorded
  decision from the assistant entry's display (`extra_json["decision"]`, `["reason"]`).
  A compaction checkpoint becomes its summary; a stored result whose call is not in the
  view is never sent (a provider would refuse it, or read a result of nothing).
- `units_of` / `evidence_of`: the same entries as compaction plans over them and as the
  summary model reads them (core.compaction).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.core import compaction, render
from agentrt.core.decide import Call, DecisionKind, compose_reason
from agentrt.runs.convert.model import call_in, display_extra, preserved_of, text_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as spb


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
