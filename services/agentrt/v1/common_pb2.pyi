import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]

class ToolResultStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_RESULT_STATUS_UNSPECIFIED: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_OK: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_ERROR: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_NOT_EXECUTED: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_INTERRUPTED: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_DENIED: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_TIMED_OUT: _ClassVar[ToolResultStatus]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NAMED: _ClassVar[ToolChoiceMode]

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_TOOL_USE: _ClassVar[StopReason]
    STOP_REASON_END_TURN: _ClassVar[StopReason]
    STOP_REASON_MAX_TOKENS: _ClassVar[StopReason]
    STOP_REASON_REFUSAL: _ClassVar[StopReason]
    STOP_REASON_CONTEXT_WINDOW_EXCEEDED: _ClassVar[StopReason]

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_SUSPENDED: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELED: _ClassVar[RunStatus]

class RunPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_PHASE_UNSPECIFIED: _ClassVar[RunPhase]
    RUN_PHASE_PROMPTED: _ClassVar[RunPhase]
    RUN_PHASE_PLANNING: _ClassVar[RunPhase]
    RUN_PHASE_EXECUTING_TOOLS: _ClassVar[RunPhase]
    RUN_PHASE_SYNTHESIZING: _ClassVar[RunPhase]
    RUN_PHASE_COMPLETED: _ClassVar[RunPhase]
    RUN_PHASE_FAILED: _ClassVar[RunPhase]
    RUN_PHASE_CANCELED: _ClassVar[RunPhase]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
TOOL_RESULT_STATUS_UNSPECIFIED: ToolResultStatus
TOOL_RESULT_STATUS_OK: ToolResultStatus
TOOL_RESULT_STATUS_ERROR: ToolResultStatus
TOOL_RESULT_STATUS_NOT_EXECUTED: ToolResultStatus
TOOL_RESULT_STATUS_INTERRUPTED: ToolResultStatus
TOOL_RESULT_STATUS_DENIED: ToolResultStatus
TOOL_RESULT_STATUS_TIMED_OUT: ToolResultStatus
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_NAMED: ToolChoiceMode
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_TOOL_USE: StopReason
STOP_REASON_END_TURN: StopReason
STOP_REASON_MAX_TOKENS: StopReason
STOP_REASON_REFUSAL: StopReason
STOP_REASON_CONTEXT_WINDOW_EXCEEDED: StopReason
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_SUSPENDED: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELED: RunStatus
RUN_PHASE_UNSPECIFIED: RunPhase
RUN_PHASE_PROMPTED: RunPhase
RUN_PHASE_PLANNING: RunPhase
RUN_PHASE_EXECUTING_TOOLS: RunPhase
RUN_PHASE_SYNTHESIZING: RunPhase
RUN_PHASE_COMPLETED: RunPhase
RUN_PHASE_FAILED: RunPhase
RUN_PHASE_CANCELED: RunPhase

class ContentBlock(_message.Message):
    __slots__ = ("text", "image", "tool_use", "tool_result", "thinking", "raw")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    text: TextBlock
    image: ImageBlock
    tool_use: ToolCall
    tool_result: ToolResult
    thinking: ThinkingBlock
    raw: RawBlock
    def __init__(self, text: _Optional[_Union[TextBlock, _Mapping]] = ..., image: _Optional[_Union[ImageBlock, _Mapping]] = ..., tool_use: _Optional[_Union[ToolCall, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResult, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingBlock, _Mapping]] = ..., raw: _Optional[_Union[RawBlock, _Mapping]] = ...) -> None: ...

class TextBlock(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ImageBlock(_message.Message):
    __slots__ = ("media_type", "data", "url")
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    media_type: str
    data: bytes
    url: str
    def __init__(self, media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., url: _Optional[str] = ...) -> None: ...

class ThinkingBlock(_message.Message):
    __slots__ = ("text", "signature", "redacted", "data")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    text: str
    signature: str
    redacted: bool
    data: str
    def __init__(self, text: _Optional[str] = ..., signature: _Optional[str] = ..., redacted: _Optional[bool] = ..., data: _Optional[str] = ...) -> None: ...

class RawBlock(_message.Message):
    __slots__ = ("provider", "type", "json")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    provider: str
    type: str
    json: str
    def __init__(self, provider: _Optional[str] = ..., type: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("call_id", "name", "arguments", "invalid_arguments", "invalid_arguments_base64", "provider_call_id", "index")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    INVALID_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    INVALID_ARGUMENTS_BASE64_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments: str
    invalid_arguments: str
    invalid_arguments_base64: bool
    provider_call_id: str
    index: int
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., invalid_arguments: _Optional[str] = ..., invalid_arguments_base64: _Optional[bool] = ..., provider_call_id: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "name", "content", "is_error", "status", "summary", "details_json", "exit_code", "output_truncated", "duration", "nested_usage", "terminate", "added_tools", "child_run_id")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    NESTED_USAGE_FIELD_NUMBER: _ClassVar[int]
    TERMINATE_FIELD_NUMBER: _ClassVar[int]
    ADDED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    content: str
    is_error: bool
    status: ToolResultStatus
    summary: str
    details_json: str
    exit_code: int
    output_truncated: bool
    duration: _duration_pb2.Duration
    nested_usage: Usage
    terminate: bool
    added_tools: _containers.RepeatedScalarFieldContainer[str]
    child_run_id: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., content: _Optional[str] = ..., is_error: _Optional[bool] = ..., status: _Optional[_Union[ToolResultStatus, str]] = ..., summary: _Optional[str] = ..., details_json: _Optional[str] = ..., exit_code: _Optional[int] = ..., output_truncated: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., nested_usage: _Optional[_Union[Usage, _Mapping]] = ..., terminate: _Optional[bool] = ..., added_tools: _Optional[_Iterable[str]] = ..., child_run_id: _Optional[str] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "description", "parameters_json_schema", "read_only", "retry_safe", "needs_approval", "timeout", "sequential", "deferred", "strict", "external")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    RETRY_SAFE_FIELD_NUMBER: _ClassVar[int]
    NEEDS_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json_schema: str
    read_only: bool
    retry_safe: bool
    needs_approval: bool
    timeout: _duration_pb2.Duration
    sequential: bool
    deferred: bool
    strict: bool
    external: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json_schema: _Optional[str] = ..., read_only: _Optional[bool] = ..., retry_safe: _Optional[bool] = ..., needs_approval: _Optional[bool] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., sequential: _Optional[bool] = ..., deferred: _Optional[bool] = ..., strict: _Optional[bool] = ..., external: _Optional[bool] = ...) -> None: ...

class CommandPolicy(_message.Message):
    __slots__ = ("allow", "deny")
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    allow: _containers.RepeatedScalarFieldContainer[str]
    deny: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, allow: _Optional[_Iterable[str]] = ..., deny: _Optional[_Iterable[str]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens", "requests")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    requests: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ..., requests: _Optional[int] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("provider", "model")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., name: _Optional[str] = ...) -> None: ...

class ModelSettings(_message.Message):
    __slots__ = ("temperature", "top_p", "max_output_tokens", "tool_choice", "disable_parallel_tool_calls", "output_json_schema", "seed")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    DISABLE_PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    max_output_tokens: int
    tool_choice: ToolChoice
    disable_parallel_tool_calls: bool
    output_json_schema: str
    seed: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., disable_parallel_tool_calls: _Optional[bool] = ..., output_json_schema: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class ModelResponse(_message.Message):
    __slots__ = ("response_id", "model", "content", "stop_reason", "provider_stop_reason", "usage", "refusal")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    model: ModelRef
    content: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    stop_reason: StopReason
    provider_stop_reason: str
    usage: Usage
    refusal: str
    def __init__(self, response_id: _Optional[str] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., content: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., provider_stop_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., refusal: _Optional[str] = ...) -> None: ...

class FailureInfo(_message.Message):
    __slots__ = ("kind", "retryable", "message", "debug_message", "reason", "details_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEBUG_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    retryable: bool
    message: str
    debug_message: str
    reason: str
    details_json: str
    def __init__(self, kind: _Optional[str] = ..., retryable: _Optional[bool] = ..., message: _Optional[str] = ..., debug_message: _Optional[str] = ..., reason: _Optional[str] = ..., details_json: _Optional[str] = ...) -> None: ...

class PageInfo(_message.Message):
    __slots__ = ("next_page_token",)
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    def __init__(self, next_page_token: _Optional[str] = ...) -> None: ...

class CallError(_message.Message):
    __slots__ = ("code", "message", "reason", "metadata", "retry_delay")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: str
    metadata: _containers.ScalarMap[str, str]
    retry_delay: _duration_pb2.Duration
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CallHeader(_message.Message):
    __slots__ = ("call_id", "timeout", "cancel", "traceparent")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    timeout: _duration_pb2.Duration
    cancel: bool
    traceparent: str
    def __init__(self, call_id: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cancel: _Optional[bool] = ..., traceparent: _Optional[str] = ...) -> None: ...
