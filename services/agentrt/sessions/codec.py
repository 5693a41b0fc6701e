"""Conversion between the SessionService protos and the store's domain values.

Owns the one place that parses an `agentrt.v1.Item`: on the way in it checks the item's
shape and extracts the facts storage needs (item type, call id, tool name); the item
itself is stored as its serialized bytes, so what the caller wrote (tool-call arguments
above all) comes back byte for byte. Also builds the synthesized output of crash
recovery (004 §2.5h).

Rules for items (the run loop writes this shape, see docs/services/sessions.md):
- exactly one of `message`, `tool_call`, `tool_result` is set;
- a tool call is its own `tool_call` item; a message never carries tool_use or
  tool_result blocks (INVALID_ENTRY), so recovery and call-id targeting see every call;
- a tool call's `arguments` is "" or JSON text (INVALID_JSON; non-JSON belongs in
  `invalid_arguments`, and the two are never both set), kept byte for byte: a stored
  non-JSON argument string would break every later model request of the session;
- every enum anywhere in the item holds a value its enum defines (INVALID_ENTRY);
- one entry is at most `MAX_ENTRY_BYTES` serialized (REQUEST_TOO_LARGE), so any stored
  entry fits in a read response (`bounded_out`);
- JSON text fields (a call's `arguments`, a result's `details_json`, `display.extra_json`,
  `payload_json`) are normalized on the way in: an escape of a lone UTF-16 surrogate
  (`\ud99c`: valid JSON, but no character) becomes `\ufffd` and nothing else changes
  (`core.text.scrub_json`), so no stored entry can make a later model request unencodable
  (issue 10 "Bad bytes").
"""

from __future__ import annotations

import json

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from agentrt.core.errors import Reason, invalid, precondition
from agentrt.core.text import scrub_json
from agentrt.sessions.domain import (
    ITEM,
    ITEM_MESSAGE,
    ITEM_TOOL_CALL,
    ITEM_TOOL_RESULT,
    Display,
    Entry,
    Ref,
    SessionInfo,
    Usage,
    check_json,
)
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb

#: What the model reads for a call whose process died before its output was recorded.
INTERRUPTED_OUTPUT = (
    "Error: this tool call was interrupted. The process running it stopped before its result "
    "was recorded, so its outcome is unknown: it may or may not have taken effect. Do not "
    "assume it succeeded; check the current state before relying on it or repeating it."
)

#: Largest entry accepted on a write, serialized, in bytes (3 MiB).
MAX_ENTRY_BYTES = 3 * 1024 * 1024
#: Byte budget of the entries in one response (3.5 MiB), so that a client with gRPC's
#: default 4 MiB receive limit can read every answer: ListEntries cuts its page before it,
#: GetContext refuses a view beyond it, and a write whose stored entries (echoed in its
#: response) would exceed it is refused before anything is written. One entry (at most
#: 3 MiB) always fits.
MAX_RESPONSE_BYTES = 3 * 1024 * 1024 + 512 * 1024


def ref_in(ref: pb.SessionRef) -> Ref:
    """Return the domain ref of a proto SessionRef (shape checked by the store)."""
    return Ref(session_id=ref.session_id, generation=ref.generation)


def _timestamp(us: int) -> Timestamp:
    return Timestamp(seconds=us // 1_000_000, nanos=(us % 1_000_000) * 1000)


def session_out(info: SessionInfo) -> pb.Session:
    """Return the proto Session of a domain session."""
    return pb.Session(
        session_id=info.session_id,
        generation=info.generation,
        hidden=info.hidden,
        parent_session_id=info.parent_session_id,
        title=info.title,
        metadata=info.metadata,
        create_time=_timestamp(info.create_time_us),
        update_time=_timestamp(info.update_time_us),
        last_seq=info.last_seq,
        entry_count=info.entry_count,
    )


def _usage_in(msg: pb.Entry, name: str) -> Usage | None:
    if not msg.HasField(name):
        return None
    u = getattr(msg, name)
    return Usage(u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens, u.requests)


def _usage_out(usage: Usage) -> cpb.Usage:
    return cpb.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        requests=usage.requests,
    )


def _item_facts(item: pb.Item, index: int) -> tuple[str, str, str]:
    where = f"entries[{index}].item"
    set_fields = [name for name in ("message", "tool_call", "tool_result") if item.HasField(name)]
    if len(set_fields) != 1:
        raise invalid(
            Reason.INVALID_ENTRY,
            f"{where}: exactly one of message, tool_call, tool_result must be set",
            field=where,
        )
    kind = set_fields[0]
    if kind == "message":
        for block in item.message.content:
            if block.WhichOneof("block") in ("tool_use", "tool_result"):
                raise invalid(
                    Reason.INVALID_ENTRY,
                    f"{where}: write each tool call and result as its own "
                    "tool_call / tool_result item, not as message blocks",
                    field=where,
                )
        return ITEM_MESSAGE, "", ""
    if kind == "tool_call":
        call = item.tool_call
        call.arguments = scrub_json(call.arguments)
        check_json(call.arguments, f"{where}.tool_call.arguments")
        if call.arguments and call.invalid_arguments:
            raise invalid(
                Reason.INVALID_ENTRY,
                f"{where}.tool_call: arguments and invalid_arguments are never both set",
                field=f"{where}.tool_call",
            )
        return ITEM_TOOL_CALL, call.call_id, call.name
    item.tool_result.details_json = scrub_json(item.tool_result.details_json)
    check_json(item.tool_result.details_json, f"{where}.tool_result.details_json", want_object=True)
    return ITEM_TOOL_RESULT, item.tool_result.call_id, item.tool_result.name


def _check_enums(msg: Message, where: str) -> None:
    """Refuse enum values outside their enums anywhere in msg (proto3 enums are open on the wire)."""
    for fd, value in msg.ListFields():
        name = f"{where}.{fd.name}"
        if fd.enum_type is not None:
            values = value if fd.is_repeated else [value]
            for v in values:
                if v not in fd.enum_type.values_by_number:
                    raise invalid(
                        Reason.INVALID_ENTRY,
                        f"{name}: {v} is not a value of {fd.enum_type.name}",
                        field=name,
                    )
        elif fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
            for i, sub in enumerate(value if fd.is_repeated else [value]):
                _check_enums(sub, f"{name}[{i}]" if fd.is_repeated else name)


def entry_in(msg: pb.Entry, index: int) -> Entry:
    """Return the domain entry of a proto Entry sent by a caller.

    Storage-assigned fields (seq, parent_id, create_time) are ignored; entry_id is kept
    (only ReplaceEntries honors it). Domain validation happens in the store. JSON text
    fields are normalized (module docstring); `msg` itself may be changed so.

    Raises:
        MeshError: INVALID_ARGUMENT with INVALID_ENTRY (malformed item, enum value out of
            range), INVALID_JSON (tool-call arguments, tool-result details) or
            REQUEST_TOO_LARGE (entry over `MAX_ENTRY_BYTES`), naming `entries[index]`.
    """
    size = msg.ByteSize()
    if size > MAX_ENTRY_BYTES:
        raise invalid(
            Reason.REQUEST_TOO_LARGE,
            f"entries[{index}] is {size} bytes; the limit per entry is {MAX_ENTRY_BYTES}",
            field=f"entries[{index}]",
        )
    _check_enums(msg, f"entries[{index}]")
    item_bytes: bytes | None = None
    item_type = call_id = tool_name = ""
    if msg.HasField("item"):
        item_type, call_id, tool_name = _item_facts(msg.item, index)
        item_bytes = msg.item.SerializeToString(deterministic=True)
    display = None
    if msg.HasField("display"):
        display = Display(msg.display.title, msg.display.summary, scrub_json(msg.display.extra_json))
    return Entry(
        kind=msg.kind,
        entry_id=msg.entry_id,
        item=item_bytes,
        item_type=item_type,
        call_id=call_id,
        tool_name=tool_name,
        payload_json=scrub_json(msg.payload_json),
        display=display,
        run_id=msg.run_id,
        turn=msg.turn,
        response_id=msg.response_id,
        usage=_usage_in(msg, "usage"),
        nested_usage=_usage_in(msg, "nested_usage"),
        target_entry_id=msg.target_entry_id,
        target_call_id=msg.target_call_id,
        folded_entry_ids=tuple(msg.folded_entry_ids),
        summary=msg.summary,
        leaf_entry_id=msg.leaf_entry_id,
    )


def entries_in(msgs: list[pb.Entry]) -> list[Entry]:
    """Return the domain entries of a request's entries, in order (see `entry_in`).

    Raises:
        MeshError: what `entry_in` raises, and INVALID_ARGUMENT/REQUEST_TOO_LARGE when the
            batch is over `MAX_RESPONSE_BYTES`: its echo in the response could not be
            received, and a write the caller saw fail would be retried into duplicates.
    """
    total = sum(m.ByteSize() for m in msgs)
    if total > MAX_RESPONSE_BYTES:
        raise invalid(
            Reason.REQUEST_TOO_LARGE,
            f"the entries are {total} bytes together; one write takes at most {MAX_RESPONSE_BYTES}",
            field="entries",
        )
    return [entry_in(m, i) for i, m in enumerate(msgs)]


def entry_out(entry: Entry) -> pb.Entry:
    """Return the proto Entry of a stored (or folded) domain entry."""
    msg = pb.Entry(
        entry_id=entry.entry_id,
        seq=entry.seq,
        parent_id=entry.parent_id,
        kind=entry.kind,
        payload_json=entry.payload_json,
        run_id=entry.run_id,
        turn=entry.turn,
        response_id=entry.response_id,
        target_entry_id=entry.target_entry_id,
        target_call_id=entry.target_call_id,
        folded_entry_ids=list(entry.folded_entry_ids),
        summary=entry.summary,
        leaf_entry_id=entry.leaf_entry_id,
        create_time=_timestamp(entry.create_time_us),
    )
    if entry.item is not None:
        msg.item.ParseFromString(entry.item)
    if entry.display is not None:
        msg.display.CopyFrom(
            pb.Display(
                title=entry.display.title, summary=entry.display.summary, extra_json=entry.display.extra_json
            )
        )
    if entry.usage is not None:
        msg.usage.CopyFrom(_usage_out(entry.usage))
    if entry.nested_usage is not None:
        msg.nested_usage.CopyFrom(_usage_out(entry.nested_usage))
    return msg


def _wire_size(msg: pb.Entry) -> int:
    # A repeated message field costs its bytes plus a tag byte and a length varint.
    size = msg.ByteSize()
    return size + 1 + (size.bit_length() + 6) // 7


def bounded_out(entries: list[Entry], budget: int = MAX_RESPONSE_BYTES) -> tuple[list[pb.Entry], bool]:
    """Return the proto entries of a read, cut before they would exceed `budget` bytes.

    Args:
        entries: the read's entries, in order.
        budget: the most bytes the entries may take in the response.

    Returns:
        (the longest prefix within the budget, but always at least one entry; True when
        entries were left off).
    """
    out: list[pb.Entry] = []
    used = 0
    for entry in entries:
        msg = entry_out(entry)
        used += _wire_size(msg)
        if out and used > budget:
            return out, True
        out.append(msg)
    return out, False


def context_out(entries: list[Entry], budget: int = MAX_RESPONSE_BYTES) -> list[pb.Entry]:
    """Return the proto entries of a context view page, whole or not at all.

    A context view is never cut silently: a caller could not tell a cut view from a
    short one and would send the model half a conversation.

    Raises:
        MeshError: FAILED_PRECONDITION/CONTEXT_TOO_LARGE when the page exceeds `budget`.
    """
    out = [entry_out(e) for e in entries]
    if sum(_wire_size(m) for m in out) > budget:
        raise precondition(
            Reason.CONTEXT_TOO_LARGE,
            f"the context view exceeds {budget} bytes; read it in pages with a positive "
            "limit and after_seq (or compact the session)",
            limit=str(budget),
        )
    return out


def interrupted_output(call: Entry) -> Entry:
    """Return the synthesized error output for a dangling tool call entry (004 §2.5h).

    The output says the outcome is unknown and must not be assumed a success; it keeps
    the call's run and turn so the log reads in place, and is marked as the runtime's.
    """
    agent = ""
    if call.item is not None:
        agent = pb.Item.FromString(call.item).agent
    item = pb.Item(
        tool_result=cpb.ToolResult(
            call_id=call.call_id,
            name=call.tool_name,
            content=INTERRUPTED_OUTPUT,
            is_error=True,
            status=cpb.TOOL_RESULT_STATUS_INTERRUPTED,
            summary="interrupted: outcome unknown",
        ),
        source=pb.ITEM_SOURCE_RUNTIME,
        agent=agent,
    )
    return Entry(
        kind=ITEM,
        item=item.SerializeToString(deterministic=True),
        item_type=ITEM_TOOL_RESULT,
        call_id=call.call_id,
        tool_name=call.tool_name,
        run_id=call.run_id,
        turn=call.turn,
        display=Display(
            title=call.tool_name,
            summary="interrupted: outcome unknown",
            extra_json=json.dumps({"recovered": True}),
        ),
    )
