import datetime

from agentrt.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATUS_UNSPECIFIED: _ClassVar[TaskStatus]
    TASK_STATUS_WORKING: _ClassVar[TaskStatus]
    TASK_STATUS_INPUT_REQUIRED: _ClassVar[TaskStatus]
    TASK_STATUS_COMPLETED: _ClassVar[TaskStatus]
    TASK_STATUS_FAILED: _ClassVar[TaskStatus]
    TASK_STATUS_CANCELED: _ClassVar[TaskStatus]

class StopOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_OUTCOME_UNSPECIFIED: _ClassVar[StopOutcome]
    STOP_OUTCOME_CANCELED: _ClassVar[StopOutcome]
    STOP_OUTCOME_AFTER_TURN: _ClassVar[StopOutcome]
    STOP_OUTCOME_ALREADY_FINISHED: _ClassVar[StopOutcome]
TASK_STATUS_UNSPECIFIED: TaskStatus
TASK_STATUS_WORKING: TaskStatus
TASK_STATUS_INPUT_REQUIRED: TaskStatus
TASK_STATUS_COMPLETED: TaskStatus
TASK_STATUS_FAILED: TaskStatus
TASK_STATUS_CANCELED: TaskStatus
STOP_OUTCOME_UNSPECIFIED: StopOutcome
STOP_OUTCOME_CANCELED: StopOutcome
STOP_OUTCOME_AFTER_TURN: StopOutcome
STOP_OUTCOME_ALREADY_FINISHED: StopOutcome

class Task(_message.Message):
    __slots__ = ("task_id", "run_id", "attempt", "status", "kind", "label", "summary", "result", "session_id", "parent_session_id", "parent_run_id", "create_time", "update_time", "failure")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    run_id: str
    attempt: int
    status: TaskStatus
    kind: str
    label: str
    summary: str
    result: str
    session_id: str
    parent_session_id: str
    parent_run_id: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    failure: _common_pb2.FailureInfo
    def __init__(self, task_id: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt: _Optional[int] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., kind: _Optional[str] = ..., label: _Optional[str] = ..., summary: _Optional[str] = ..., result: _Optional[str] = ..., session_id: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure: _Optional[_Union[_common_pb2.FailureInfo, _Mapping]] = ...) -> None: ...

class SpawnTaskRequest(_message.Message):
    __slots__ = ("parent_session_id", "parent_run_id", "agent_name", "input", "label", "kind")
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    parent_session_id: str
    parent_run_id: str
    agent_name: str
    input: str
    label: str
    kind: str
    def __init__(self, parent_session_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., input: _Optional[str] = ..., label: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class SpawnTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id", "wait")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    wait: _duration_pb2.Duration
    def __init__(self, task_id: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("parent_session_id", "page_size", "page_token")
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent_session_id: str
    page_size: int
    page_token: str
    def __init__(self, parent_session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetryTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class RetryTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class StopTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class StopTaskResponse(_message.Message):
    __slots__ = ("outcome", "task")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    outcome: StopOutcome
    task: Task
    def __init__(self, outcome: _Optional[_Union[StopOutcome, str]] = ..., task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...
