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

class SandboxBackend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_BACKEND_UNSPECIFIED: _ClassVar[SandboxBackend]
    SANDBOX_BACKEND_LOCAL: _ClassVar[SandboxBackend]
    SANDBOX_BACKEND_DOCKER: _ClassVar[SandboxBackend]

class SandboxState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_STATE_UNSPECIFIED: _ClassVar[SandboxState]
    SANDBOX_STATE_ABSENT: _ClassVar[SandboxState]
    SANDBOX_STATE_STOPPED: _ClassVar[SandboxState]
    SANDBOX_STATE_RUNNING: _ClassVar[SandboxState]

class ExecutionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATE_UNSPECIFIED: _ClassVar[ExecutionState]
    EXECUTION_STATE_ABSENT: _ClassVar[ExecutionState]
    EXECUTION_STATE_STARTED: _ClassVar[ExecutionState]
    EXECUTION_STATE_FINISHED: _ClassVar[ExecutionState]
SANDBOX_BACKEND_UNSPECIFIED: SandboxBackend
SANDBOX_BACKEND_LOCAL: SandboxBackend
SANDBOX_BACKEND_DOCKER: SandboxBackend
SANDBOX_STATE_UNSPECIFIED: SandboxState
SANDBOX_STATE_ABSENT: SandboxState
SANDBOX_STATE_STOPPED: SandboxState
SANDBOX_STATE_RUNNING: SandboxState
EXECUTION_STATE_UNSPECIFIED: ExecutionState
EXECUTION_STATE_ABSENT: ExecutionState
EXECUTION_STATE_STARTED: ExecutionState
EXECUTION_STATE_FINISHED: ExecutionState

class Sandbox(_message.Message):
    __slots__ = ("sandbox_id", "backend", "state", "workspace")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    backend: SandboxBackend
    state: SandboxState
    workspace: str
    def __init__(self, sandbox_id: _Optional[str] = ..., backend: _Optional[_Union[SandboxBackend, str]] = ..., state: _Optional[_Union[SandboxState, str]] = ..., workspace: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    def __init__(self, tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class ExecuteToolRequest(_message.Message):
    __slots__ = ("run_id", "call", "sandbox_id", "workspace", "timeout", "max_output_bytes", "command_policy", "attempt")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_POLICY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    call: _common_pb2.ToolCall
    sandbox_id: str
    workspace: str
    timeout: _duration_pb2.Duration
    max_output_bytes: int
    command_policy: _common_pb2.CommandPolicy
    attempt: int
    def __init__(self, run_id: _Optional[str] = ..., call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., sandbox_id: _Optional[str] = ..., workspace: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_output_bytes: _Optional[int] = ..., command_policy: _Optional[_Union[_common_pb2.CommandPolicy, _Mapping]] = ..., attempt: _Optional[int] = ...) -> None: ...

class ExecuteToolResponse(_message.Message):
    __slots__ = ("result", "replayed")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.ToolResult
    replayed: bool
    def __init__(self, result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class ExecuteToolCallsRequest(_message.Message):
    __slots__ = ("header", "request", "progress")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.CallHeader
    request: ExecuteToolRequest
    progress: bool
    def __init__(self, header: _Optional[_Union[_common_pb2.CallHeader, _Mapping]] = ..., request: _Optional[_Union[ExecuteToolRequest, _Mapping]] = ..., progress: _Optional[bool] = ...) -> None: ...

class ExecuteToolCallsResponse(_message.Message):
    __slots__ = ("call_id", "progress", "result", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    progress: ToolProgress
    result: ExecuteToolResponse
    error: _common_pb2.CallError
    def __init__(self, call_id: _Optional[int] = ..., progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., result: _Optional[_Union[ExecuteToolResponse, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.CallError, _Mapping]] = ...) -> None: ...

class StreamExecuteToolRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: ExecuteToolRequest
    def __init__(self, request: _Optional[_Union[ExecuteToolRequest, _Mapping]] = ...) -> None: ...

class StreamExecuteToolResponse(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: ToolProgress
    result: ExecuteToolResponse
    def __init__(self, progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., result: _Optional[_Union[ExecuteToolResponse, _Mapping]] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("stream", "text")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    text: str
    def __init__(self, stream: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class GetExecutionRequest(_message.Message):
    __slots__ = ("run_id", "call_id", "attempt")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    call_id: str
    attempt: int
    def __init__(self, run_id: _Optional[str] = ..., call_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class GetExecutionResponse(_message.Message):
    __slots__ = ("state", "result")
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    state: ExecutionState
    result: _common_pb2.ToolResult
    def __init__(self, state: _Optional[_Union[ExecutionState, str]] = ..., result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class CancelExecutionRequest(_message.Message):
    __slots__ = ("run_id", "call_id", "attempt", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    call_id: str
    attempt: int
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., call_id: _Optional[str] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelExecutionResponse(_message.Message):
    __slots__ = ("state", "result")
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    state: ExecutionState
    result: _common_pb2.ToolResult
    def __init__(self, state: _Optional[_Union[ExecutionState, str]] = ..., result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class SandboxLimits(_message.Message):
    __slots__ = ("cpu_seconds", "memory_bytes", "file_size_bytes", "open_files")
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    cpu_seconds: int
    memory_bytes: int
    file_size_bytes: int
    open_files: int
    def __init__(self, cpu_seconds: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., file_size_bytes: _Optional[int] = ..., open_files: _Optional[int] = ...) -> None: ...

class CreateSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "backend", "workspace", "image", "env", "user", "network", "limits")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    backend: SandboxBackend
    workspace: str
    image: str
    env: _containers.ScalarMap[str, str]
    user: str
    network: str
    limits: SandboxLimits
    def __init__(self, sandbox_id: _Optional[str] = ..., backend: _Optional[_Union[SandboxBackend, str]] = ..., workspace: _Optional[str] = ..., image: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., network: _Optional[str] = ..., limits: _Optional[_Union[SandboxLimits, _Mapping]] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class GetSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class GetSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class StopSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class StopSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class DestroySandboxRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class DestroySandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkspaceTarget(_message.Message):
    __slots__ = ("sandbox_id", "workspace", "run_id", "path")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    workspace: str
    run_id: str
    path: str
    def __init__(self, sandbox_id: _Optional[str] = ..., workspace: _Optional[str] = ..., run_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class UploadWorkspaceRequest(_message.Message):
    __slots__ = ("target", "data")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    target: WorkspaceTarget
    data: bytes
    def __init__(self, target: _Optional[_Union[WorkspaceTarget, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadWorkspaceResponse(_message.Message):
    __slots__ = ("files", "bytes")
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    files: int
    bytes: int
    def __init__(self, files: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class DownloadWorkspaceRequest(_message.Message):
    __slots__ = ("target", "gzip")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    GZIP_FIELD_NUMBER: _ClassVar[int]
    target: WorkspaceTarget
    gzip: bool
    def __init__(self, target: _Optional[_Union[WorkspaceTarget, _Mapping]] = ..., gzip: _Optional[bool] = ...) -> None: ...

class DownloadWorkspaceResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...
