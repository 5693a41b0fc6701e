"""The session store's domain vocabulary: refs, sessions, entries, and entry validation.

Owns the shapes every other module of the service passes around (no grpc, no SQL, no
protobuf): `Ref` (id + generation, 004 §2.5e2 "a session id names a session, not a
place"), `SessionInfo`, `Entry`, `Display`, `Usage`, the well-known kinds (004 §2.5b), and
`validate_entry`, the checks that need no database.

Invariants:
- An `Entry`'s item is opaque bytes here (a serialized agentrt.v1.Item); the codec that
  knows the proto extracts the few facts storage needs (`item_type`, `call_id`,
  `tool_name`) so the tree logic never parses an item.
- Entries are frozen: a read hands out values, never shared mutable state, so a fold can
  never write through to what the next read returns (004 §2.5b).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from agentrt.core import jsontext
from agentrt.core.errors import Reason, invalid
from agentrt.core.ids import valid_id

# Well-known kinds (004 §2.5b). The vocabulary is open: any other kind is stored as is.
ITEM = "item"
ANNOTATION = "annotation"
COMPACTION = "compaction"
LEAF = "leaf"
UPDATE = "update"
TERMINAL_OUTPUT = "terminal_output"
CUSTOM = "custom"

#: Kinds the model reads by default; the rest are recorded, never projected.
PROJECTED_KINDS = frozenset({ITEM, COMPACTION})
#: Kinds that shape the view rather than appear in it (folded into other entries).
STRUCTURAL_KINDS = frozenset({LEAF, UPDATE})

ITEM_MESSAGE = "message"
ITEM_TOOL_CALL = "tool_call"
ITEM_TOOL_RESULT = "tool_result"

MAX_ENTRIES_PER_APPEND = 1000
MAX_TITLE_CHARS = 1000
MAX_METADATA_BYTES = 64 * 1024
_KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}\Z")
_MAX_RESPONSE_ID_CHARS = 256


@dataclass(frozen=True)
class Ref:
    """The address of one incarnation of a session.

    Attributes:
        session_id: the session id.
        generation: the incarnation, from 1; 0 means "whichever is current".
    """

    session_id: str
    generation: int = 0


@dataclass(frozen=True)
class Usage:
    """Token counts of one model response (004 §2.7f); all in tokens, `requests` a count."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0

    def to_json(self) -> str:
        """Return the compact JSON object stored in the database."""
        return json.dumps(
            [
                self.input_tokens,
                self.output_tokens,
                self.cached_input_tokens,
                self.reasoning_tokens,
                self.requests,
            ]
        )

    @classmethod
    def from_json(cls, text: str | None) -> Usage | None:
        """Read back what `to_json` wrote; None stays None."""
        if not text:
            return None
        return cls(*json.loads(text))


@dataclass(frozen=True)
class Display:
    """What a UI shows for an entry; never sent to the model (004 §2.7b).

    Attributes:
        title: card heading.
        summary: one-line account.
        extra_json: host data as a JSON object string ("" when none).
    """

    title: str = ""
    summary: str = ""
    extra_json: str = ""


@dataclass(frozen=True)
class Entry:
    """One stored record of a session (004 §2.5b).

    Storage assigns `entry_id`, `seq`, `parent_id` and `create_time_us`; callers leave them
    at their defaults (they are ignored on append).

    Attributes:
        kind: open vocabulary; see the module constants.
        entry_id: unique in the session, never reused, kept across a fork.
        seq: strictly increasing in the session, never reused (004 §2.5e2).
        parent_id: the entry this one follows on its branch; "" for a root.
        item: a serialized agentrt.v1.Item for kind "item"; None otherwise.
        item_type: "message", "tool_call", "tool_result" or "" (from the codec).
        call_id: the tool call id, for tool_call and tool_result items.
        tool_name: the tool's name, for tool_call and tool_result items.
        payload_json: payload of kinds without an item, JSON stored verbatim.
        display: UI hints, or None.
        run_id: the run that wrote the entry.
        turn: that run's turn, from 1; 0 when unknown.
        response_id: the model response the entry belongs to.
        usage: that response's usage, on its last entry only (004 §2.7f).
        nested_usage: tokens a tool spent on model calls of its own, kept apart.
        target_entry_id: for "update", the entry amended, by id.
        target_call_id: for "update", the tool call amended, by call id.
        folded_entry_ids: for "compaction", the entries the checkpoint folds.
        summary: for "compaction", the text standing in for the folded entries.
        leaf_entry_id: for "leaf", the entry that becomes the active leaf.
        create_time_us: when it was stored, microseconds since the Unix epoch.
    """

    kind: str
    entry_id: str = ""
    seq: int = 0
    parent_id: str = ""
    item: bytes | None = None
    item_type: str = ""
    call_id: str = ""
    tool_name: str = ""
    payload_json: str = ""
    display: Display | None = None
    run_id: str = ""
    turn: int = 0
    response_id: str = ""
    usage: Usage | None = None
    nested_usage: Usage | None = None
    target_entry_id: str = ""
    target_call_id: str = ""
    folded_entry_ids: tuple[str, ...] = ()
    summary: str = ""
    leaf_entry_id: str = ""
    create_time_us: int = 0


@dataclass(frozen=True)
class SessionInfo:
    """A session's record apart from its entries (004 §2.5e).

    `last_seq` and `entry_count` are folds over the stored log, computed on read.

    Attributes:
        session_id: the id.
        generation: the incarnation, from 1.
        hidden: left out of listings by default.
        parent_session_id: the session this one serves ("" when none).
        parent_generation: the incarnation of that parent it was created for (0 when none).
        title: human title.
        metadata: free string-to-string metadata.
        create_time_us: creation time, microseconds since the Unix epoch.
        update_time_us: the change record: the last write, never moving backwards.
        last_seq: highest seq stored in this incarnation, 0 when empty.
        entry_count: entries stored in this incarnation.
    """

    session_id: str
    generation: int
    hidden: bool = False
    parent_session_id: str = ""
    parent_generation: int = 0
    title: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    create_time_us: int = 0
    update_time_us: int = 0
    last_seq: int = 0
    entry_count: int = 0


def check_json(text: str, where: str, *, want_object: bool = False) -> None:
    """Check that text ("" allowed) is JSON, an object when want_object.

    JSON here is read strictly (core.jsontext: no NaN, Infinity or overflowing numbers), as
    the gateway's `canonical.is_json` decides which tool-call arguments are JSON; nesting too
    deep to read is not JSON.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_JSON naming `where`.
    """
    if not text:
        return
    try:
        value = jsontext.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid(Reason.INVALID_JSON, f"{where} is not valid JSON: {exc}", field=where) from None
    if want_object and not isinstance(value, dict):
        raise invalid(Reason.INVALID_JSON, f"{where} must be a JSON object", field=where)


def check_ref(ref: Ref, where: str = "session") -> None:
    """Check a session ref's shape.

    Raises:
        MeshError: INVALID_ARGUMENT with MISSING_FIELD (no id), INVALID_ID (malformed id)
            or INVALID_VALUE (negative generation).
    """
    name = f"{where}.session_id"
    if not ref.session_id:
        raise invalid(Reason.MISSING_FIELD, f"{name} is required", field=name)
    if not valid_id(ref.session_id):
        raise invalid(Reason.INVALID_ID, f"{name} is malformed", field=name)
    if ref.generation < 0:
        raise invalid(
            Reason.INVALID_VALUE, f"{where}.generation must not be negative", field=f"{where}.generation"
        )


def check_session_fields(title: str, metadata: dict[str, str]) -> None:
    """Check a new session's title and metadata bounds.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE when the title exceeds 1,000 characters,
            a metadata key is empty, or the metadata exceeds 64 KiB as JSON.
    """
    if len(title) > MAX_TITLE_CHARS:
        raise invalid(Reason.INVALID_VALUE, f"title exceeds {MAX_TITLE_CHARS} characters", field="title")
    if any(not key for key in metadata):
        raise invalid(Reason.INVALID_VALUE, "metadata keys must not be empty", field="metadata")
    if len(json.dumps(metadata).encode()) > MAX_METADATA_BYTES:
        raise invalid(Reason.INVALID_VALUE, f"metadata exceeds {MAX_METADATA_BYTES} bytes", field="metadata")


def _entry_error(index: int, message: str, reason: Reason = Reason.INVALID_ENTRY) -> Exception:
    return invalid(reason, f"entries[{index}]: {message}", field=f"entries[{index}]")


def _check_usage(usage: Usage | None, index: int, name: str) -> None:
    if usage is None:
        return
    if (
        min(
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
            usage.requests,
        )
        < 0
    ):
        raise _entry_error(index, f"{name} counts must not be negative", Reason.INVALID_VALUE)


def validate_entry(entry: Entry, index: int) -> None:
    """Check one entry to append (the checks that need no database).

    An unknown kind passes: the vocabulary is open (004 §2.5b).

    Args:
        entry: the entry as the caller sent it.
        index: its position in the request, for the error's `field` metadata.

    Raises:
        MeshError: INVALID_ARGUMENT with INVALID_ENTRY (no kind, malformed kind, item kind
            without an item, tool call/result without call id, update without target,
            compaction without folded ids, leaf move without target), INVALID_JSON
            (payload_json, display.extra_json), INVALID_ID (malformed ids named by the
            entry) or INVALID_VALUE (negative turn or usage, oversize response id).
    """
    if not entry.kind:
        raise _entry_error(index, "kind is required")
    if not _KIND_RE.match(entry.kind):
        raise _entry_error(index, "kind must be 1..64 chars of letters, digits and _ . : / -")
    if entry.kind == ITEM and entry.item is None:
        raise _entry_error(index, "an entry of kind 'item' needs an item")
    if entry.item_type in (ITEM_TOOL_CALL, ITEM_TOOL_RESULT):
        if not entry.call_id:
            raise _entry_error(index, f"a {entry.item_type} item needs a call_id")
        if entry.item_type == ITEM_TOOL_CALL and not entry.tool_name:
            raise _entry_error(index, "a tool_call item needs a name")
    check_json(entry.payload_json, f"entries[{index}].payload_json")
    if entry.display is not None:
        check_json(entry.display.extra_json, f"entries[{index}].display.extra_json", want_object=True)
    if entry.run_id and not valid_id(entry.run_id):
        raise _entry_error(index, "run_id is malformed", Reason.INVALID_ID)
    if entry.turn < 0:
        raise _entry_error(index, "turn must not be negative", Reason.INVALID_VALUE)
    if len(entry.response_id) > _MAX_RESPONSE_ID_CHARS:
        raise _entry_error(
            index, f"response_id exceeds {_MAX_RESPONSE_ID_CHARS} characters", Reason.INVALID_VALUE
        )
    _check_usage(entry.usage, index, "usage")
    _check_usage(entry.nested_usage, index, "nested_usage")
    if entry.kind == UPDATE:
        if not entry.target_entry_id and not entry.target_call_id:
            raise _entry_error(index, "an update needs target_entry_id or target_call_id")
        if entry.target_entry_id and not valid_id(entry.target_entry_id):
            raise _entry_error(index, "target_entry_id is malformed", Reason.INVALID_ID)
    if entry.kind == COMPACTION:
        if not entry.folded_entry_ids:
            raise _entry_error(index, "a compaction checkpoint needs folded_entry_ids")
        if not all(valid_id(i) for i in entry.folded_entry_ids):
            raise _entry_error(index, "folded_entry_ids holds a malformed id", Reason.INVALID_ID)
    if entry.kind == LEAF:
        if not entry.leaf_entry_id:
            raise _entry_error(index, "a leaf move needs leaf_entry_id")
        if not valid_id(entry.leaf_entry_id):
            raise _entry_error(index, "leaf_entry_id is malformed", Reason.INVALID_ID)


def validate_entries(entries: list[Entry], *, allow_empty: bool = False) -> None:
    """Check a batch of entries: 1..1,000 (0 allowed when allow_empty), each valid.

    Raises:
        MeshError: INVALID_ARGUMENT with MISSING_FIELD (empty batch), INVALID_VALUE (more
            than 1,000), or any reason of `validate_entry`.
    """
    if not entries and not allow_empty:
        raise invalid(Reason.MISSING_FIELD, "entries is required (1..1000)", field="entries")
    if len(entries) > MAX_ENTRIES_PER_APPEND:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{len(entries)} entries in one request; the limit is {MAX_ENTRIES_PER_APPEND}",
            field="entries",
        )
    for index, entry in enumerate(entries):
        validate_entry(entry, index)
