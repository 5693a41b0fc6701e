import datetime

from agentrt.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_KIND_UNSPECIFIED: _ClassVar[EntryKind]
    ENTRY_KIND_ITEM: _ClassVar[EntryKind]
    ENTRY_KIND_ANNOTATION: _ClassVar[EntryKind]
    ENTRY_KIND_COMPACTION: _ClassVar[EntryKind]
    ENTRY_KIND_LEAF: _ClassVar[EntryKind]
    ENTRY_KIND_UPDATE: _ClassVar[EntryKind]
    ENTRY_KIND_TERMINAL_OUTPUT: _ClassVar[EntryKind]
    ENTRY_KIND_CUSTOM: _ClassVar[EntryKind]

class ItemSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ITEM_SOURCE_UNSPECIFIED: _ClassVar[ItemSource]
    ITEM_SOURCE_MODEL: _ClassVar[ItemSource]
    ITEM_SOURCE_USER: _ClassVar[ItemSource]
    ITEM_SOURCE_TOOL: _ClassVar[ItemSource]
    ITEM_SOURCE_RUNTIME: _ClassVar[ItemSource]
ENTRY_KIND_UNSPECIFIED: EntryKind
ENTRY_KIND_ITEM: EntryKind
ENTRY_KIND_ANNOTATION: EntryKind
ENTRY_KIND_COMPACTION: EntryKind
ENTRY_KIND_LEAF: EntryKind
ENTRY_KIND_UPDATE: EntryKind
ENTRY_KIND_TERMINAL_OUTPUT: EntryKind
ENTRY_KIND_CUSTOM: EntryKind
ITEM_SOURCE_UNSPECIFIED: ItemSource
ITEM_SOURCE_MODEL: ItemSource
ITEM_SOURCE_USER: ItemSource
ITEM_SOURCE_TOOL: ItemSource
ITEM_SOURCE_RUNTIME: ItemSource

class SessionRef(_message.Message):
    __slots__ = ("session_id", "generation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    generation: int
    def __init__(self, session_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "generation", "hidden", "parent_session_id", "title", "metadata", "create_time", "update_time", "last_seq", "entry_count")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    generation: int
    hidden: bool
    parent_session_id: str
    title: str
    metadata: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    last_seq: int
    entry_count: int
    def __init__(self, session_id: _Optional[str] = ..., generation: _Optional[int] = ..., hidden: _Optional[bool] = ..., parent_session_id: _Optional[str] = ..., title: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seq: _Optional[int] = ..., entry_count: _Optional[int] = ...) -> None: ...

class Item(_message.Message):
    __slots__ = ("message", "tool_call", "tool_result", "source", "agent")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.Message
    tool_call: _common_pb2.ToolCall
    tool_result: _common_pb2.ToolResult
    source: ItemSource
    agent: str
    def __init__(self, message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., tool_call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., tool_result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., source: _Optional[_Union[ItemSource, str]] = ..., agent: _Optional[str] = ...) -> None: ...

class Display(_message.Message):
    __slots__ = ("title", "summary", "extra_json")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    title: str
    summary: str
    extra_json: str
    def __init__(self, title: _Optional[str] = ..., summary: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("entry_id", "seq", "parent_id", "kind", "item", "payload_json", "display", "run_id", "turn", "response_id", "usage", "nested_usage", "target_entry_id", "target_call_id", "folded_entry_ids", "summary", "leaf_entry_id", "create_time")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    NESTED_USAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    FOLDED_ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    seq: int
    parent_id: str
    kind: str
    item: Item
    payload_json: str
    display: Display
    run_id: str
    turn: int
    response_id: str
    usage: _common_pb2.Usage
    nested_usage: _common_pb2.Usage
    target_entry_id: str
    target_call_id: str
    folded_entry_ids: _containers.RepeatedScalarFieldContainer[str]
    summary: str
    leaf_entry_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, entry_id: _Optional[str] = ..., seq: _Optional[int] = ..., parent_id: _Optional[str] = ..., kind: _Optional[str] = ..., item: _Optional[_Union[Item, _Mapping]] = ..., payload_json: _Optional[str] = ..., display: _Optional[_Union[Display, _Mapping]] = ..., run_id: _Optional[str] = ..., turn: _Optional[int] = ..., response_id: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., nested_usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., target_entry_id: _Optional[str] = ..., target_call_id: _Optional[str] = ..., folded_entry_ids: _Optional[_Iterable[str]] = ..., summary: _Optional[str] = ..., leaf_entry_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("session_id", "hidden", "parent_session_id", "title", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    hidden: bool
    parent_session_id: str
    title: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., hidden: _Optional[bool] = ..., parent_session_id: _Optional[str] = ..., title: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "include_hidden")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    include_hidden: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_hidden: _Optional[bool] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted_entries",)
    DELETED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    deleted_entries: int
    def __init__(self, deleted_entries: _Optional[int] = ...) -> None: ...

class AppendEntriesRequest(_message.Message):
    __slots__ = ("session", "entries", "expected_last_seq", "include_tail")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TAIL_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    expected_last_seq: int
    include_tail: bool
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., expected_last_seq: _Optional[int] = ..., include_tail: _Optional[bool] = ...) -> None: ...

class AppendEntriesResponse(_message.Message):
    __slots__ = ("entries", "generation", "tail", "tail_last_seq")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    TAIL_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    generation: int
    tail: _containers.RepeatedCompositeFieldContainer[Entry]
    tail_last_seq: int
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., generation: _Optional[int] = ..., tail: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., tail_last_seq: _Optional[int] = ...) -> None: ...

class AppendEntriesCallsRequest(_message.Message):
    __slots__ = ("header", "request")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.CallHeader
    request: AppendEntriesRequest
    def __init__(self, header: _Optional[_Union[_common_pb2.CallHeader, _Mapping]] = ..., request: _Optional[_Union[AppendEntriesRequest, _Mapping]] = ...) -> None: ...

class AppendEntriesCallsResponse(_message.Message):
    __slots__ = ("call_id", "response", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    response: AppendEntriesResponse
    error: _common_pb2.CallError
    def __init__(self, call_id: _Optional[int] = ..., response: _Optional[_Union[AppendEntriesResponse, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.CallError, _Mapping]] = ...) -> None: ...

class ListEntriesRequest(_message.Message):
    __slots__ = ("session", "after_seq", "limit")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    after_seq: int
    limit: int
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., after_seq: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ListEntriesResponse(_message.Message):
    __slots__ = ("entries", "last_seq")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    last_seq: int
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., last_seq: _Optional[int] = ...) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ("session", "after_seq", "limit", "include_unprojected")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_UNPROJECTED_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    after_seq: int
    limit: int
    include_unprojected: bool
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., after_seq: _Optional[int] = ..., limit: _Optional[int] = ..., include_unprojected: _Optional[bool] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ("entries", "last_seq", "leaf_entry_id")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    last_seq: int
    leaf_entry_id: str
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., last_seq: _Optional[int] = ..., leaf_entry_id: _Optional[str] = ...) -> None: ...

class SwitchBranchRequest(_message.Message):
    __slots__ = ("session", "leaf_entry_id")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    leaf_entry_id: str
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., leaf_entry_id: _Optional[str] = ...) -> None: ...

class SwitchBranchResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ("session", "leaf_entry_id", "new_session_id")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    leaf_entry_id: str
    new_session_id: str
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., leaf_entry_id: _Optional[str] = ..., new_session_id: _Optional[str] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ReplaceEntriesRequest(_message.Message):
    __slots__ = ("session", "expected_last_seq", "entries")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    expected_last_seq: int
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., expected_last_seq: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ...) -> None: ...

class ReplaceEntriesResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ...) -> None: ...

class RecoverSessionRequest(_message.Message):
    __slots__ = ("session", "retry_safe_tools")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    RETRY_SAFE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    retry_safe_tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., retry_safe_tools: _Optional[_Iterable[str]] = ...) -> None: ...

class RecoverSessionResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ...) -> None: ...

class WatchSessionRequest(_message.Message):
    __slots__ = ("session", "after_seq")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    after_seq: int
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., after_seq: _Optional[int] = ...) -> None: ...

class WatchSessionResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...
