import datetime

from agentrt.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TokenCountKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_COUNT_KIND_UNSPECIFIED: _ClassVar[TokenCountKind]
    TOKEN_COUNT_KIND_EXACT: _ClassVar[TokenCountKind]
    TOKEN_COUNT_KIND_PROVIDER_ESTIMATE: _ClassVar[TokenCountKind]
TOKEN_COUNT_KIND_UNSPECIFIED: TokenCountKind
TOKEN_COUNT_KIND_EXACT: TokenCountKind
TOKEN_COUNT_KIND_PROVIDER_ESTIMATE: TokenCountKind

class ModelRequest(_message.Message):
    __slots__ = ("model", "system", "messages", "tools", "settings", "tenant", "run_id", "max_queue_wait", "idempotency_key")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_WAIT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    system: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    settings: _common_pb2.ModelSettings
    tenant: str
    run_id: str
    max_queue_wait: _duration_pb2.Duration
    idempotency_key: str
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., system: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ..., settings: _Optional[_Union[_common_pb2.ModelSettings, _Mapping]] = ..., tenant: _Optional[str] = ..., run_id: _Optional[str] = ..., max_queue_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: ModelRequest
    def __init__(self, request: _Optional[_Union[ModelRequest, _Mapping]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("response", "retries", "queue_wait", "replayed")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    response: _common_pb2.ModelResponse
    retries: int
    queue_wait: _duration_pb2.Duration
    replayed: bool
    def __init__(self, response: _Optional[_Union[_common_pb2.ModelResponse, _Mapping]] = ..., retries: _Optional[int] = ..., queue_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class StreamGenerateRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: ModelRequest
    def __init__(self, request: _Optional[_Union[ModelRequest, _Mapping]] = ...) -> None: ...

class StreamGenerateCallsRequest(_message.Message):
    __slots__ = ("header", "request")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.CallHeader
    request: ModelRequest
    def __init__(self, header: _Optional[_Union[_common_pb2.CallHeader, _Mapping]] = ..., request: _Optional[_Union[ModelRequest, _Mapping]] = ...) -> None: ...

class StreamGenerateCallsResponse(_message.Message):
    __slots__ = ("call_id", "event", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    event: StreamGenerateResponse
    error: _common_pb2.CallError
    def __init__(self, call_id: _Optional[int] = ..., event: _Optional[_Union[StreamGenerateResponse, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.CallError, _Mapping]] = ...) -> None: ...

class StreamGenerateResponse(_message.Message):
    __slots__ = ("text_delta", "thinking_delta", "tool_call_delta", "final")
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    THINKING_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    text_delta: str
    thinking_delta: str
    tool_call_delta: ToolCallDelta
    final: GenerateResponse
    def __init__(self, text_delta: _Optional[str] = ..., thinking_delta: _Optional[str] = ..., tool_call_delta: _Optional[_Union[ToolCallDelta, _Mapping]] = ..., final: _Optional[_Union[GenerateResponse, _Mapping]] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "name", "arguments_delta")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    arguments_delta: str
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., arguments_delta: _Optional[str] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: ModelRequest
    def __init__(self, request: _Optional[_Union[ModelRequest, _Mapping]] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("input_tokens", "kind")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    kind: TokenCountKind
    def __init__(self, input_tokens: _Optional[int] = ..., kind: _Optional[_Union[TokenCountKind, str]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("model", "counts_tokens", "streams")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNTS_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    counts_tokens: bool
    streams: bool
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., counts_tokens: _Optional[bool] = ..., streams: _Optional[bool] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class CancelGenerateRequest(_message.Message):
    __slots__ = ("idempotency_key",)
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    def __init__(self, idempotency_key: _Optional[str] = ...) -> None: ...

class CancelGenerateResponse(_message.Message):
    __slots__ = ("canceled",)
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    canceled: bool
    def __init__(self, canceled: _Optional[bool] = ...) -> None: ...
