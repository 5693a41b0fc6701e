import datetime

from agentrt.v1 import common_pb2 as _common_pb2
from agentrt.v1 import run_service_pb2 as _run_service_pb2
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
    STOP_OUTCOME_FINISHED_FIRST: _ClassVar[StopOutcome]
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
STOP_OUTCOME_FINISHED_FIRST: StopOutcome

class Task(_message.Message):
    __slots__ = ("task_id", "run_id", "attempt", "status", "kind", "label", "summary", "result", "session_id", "parent_session_id", "parent_run_id", "create_time", "update_time", "failure", "max_attempts", "state", "session_generation", "parent_generation", "depth", "continuations", "agent_name", "agent_version", "workspace", "step", "steps", "pending_delivery_id", "notified_seq", "change_seq")
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
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SESSION_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONS_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PENDING_DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    NOTIFIED_SEQ_FIELD_NUMBER: _ClassVar[int]
    CHANGE_SEQ_FIELD_NUMBER: _ClassVar[int]
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
    max_attempts: int
    state: str
    session_generation: int
    parent_generation: int
    depth: int
    continuations: int
    agent_name: str
    agent_version: int
    workspace: str
    step: int
    steps: int
    pending_delivery_id: str
    notified_seq: int
    change_seq: int
    def __init__(self, task_id: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt: _Optional[int] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., kind: _Optional[str] = ..., label: _Optional[str] = ..., summary: _Optional[str] = ..., result: _Optional[str] = ..., session_id: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure: _Optional[_Union[_common_pb2.FailureInfo, _Mapping]] = ..., max_attempts: _Optional[int] = ..., state: _Optional[str] = ..., session_generation: _Optional[int] = ..., parent_generation: _Optional[int] = ..., depth: _Optional[int] = ..., continuations: _Optional[int] = ..., agent_name: _Optional[str] = ..., agent_version: _Optional[int] = ..., workspace: _Optional[str] = ..., step: _Optional[int] = ..., steps: _Optional[int] = ..., pending_delivery_id: _Optional[str] = ..., notified_seq: _Optional[int] = ..., change_seq: _Optional[int] = ...) -> None: ...

class SpawnTaskRequest(_message.Message):
    __slots__ = ("parent_session_id", "parent_run_id", "agent_name", "input", "label", "kind", "agent_version", "agent", "state", "steps", "workspace", "idempotency_key", "hold_delivery")
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    HOLD_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    parent_session_id: str
    parent_run_id: str
    agent_name: str
    input: str
    label: str
    kind: str
    agent_version: int
    agent: _run_service_pb2.AgentSpec
    state: str
    steps: _containers.RepeatedScalarFieldContainer[str]
    workspace: str
    idempotency_key: str
    hold_delivery: bool
    def __init__(self, parent_session_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., input: _Optional[str] = ..., label: _Optional[str] = ..., kind: _Optional[str] = ..., agent_version: _Optional[int] = ..., agent: _Optional[_Union[_run_service_pb2.AgentSpec, _Mapping]] = ..., state: _Optional[str] = ..., steps: _Optional[_Iterable[str]] = ..., workspace: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., hold_delivery: _Optional[bool] = ...) -> None: ...

class SpawnTaskResponse(_message.Message):
    __slots__ = ("task", "held_delivery_id")
    TASK_FIELD_NUMBER: _ClassVar[int]
    HELD_DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    task: Task
    held_delivery_id: str
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., held_delivery_id: _Optional[str] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id", "wait", "hold_delivery", "caller_run_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    HOLD_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    CALLER_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    wait: _duration_pb2.Duration
    hold_delivery: bool
    caller_run_id: str
    def __init__(self, task_id: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., hold_delivery: _Optional[bool] = ..., caller_run_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "held_delivery_id")
    TASK_FIELD_NUMBER: _ClassVar[int]
    HELD_DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    task: Task
    held_delivery_id: str
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., held_delivery_id: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("task_id", "hold_delivery", "caller_run_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HOLD_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    CALLER_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    hold_delivery: bool
    caller_run_id: str
    def __init__(self, task_id: _Optional[str] = ..., hold_delivery: _Optional[bool] = ..., caller_run_id: _Optional[str] = ...) -> None: ...

class RetryTaskResponse(_message.Message):
    __slots__ = ("task", "launched", "held_delivery_id")
    TASK_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    HELD_DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    task: Task
    launched: bool
    held_delivery_id: str
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., launched: _Optional[bool] = ..., held_delivery_id: _Optional[str] = ...) -> None: ...

class StopTaskRequest(_message.Message):
    __slots__ = ("task_id", "reason", "hold_delivery", "caller_run_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HOLD_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    CALLER_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    hold_delivery: bool
    caller_run_id: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ..., hold_delivery: _Optional[bool] = ..., caller_run_id: _Optional[str] = ...) -> None: ...

class StopTaskResponse(_message.Message):
    __slots__ = ("outcome", "task", "held_delivery_id")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    HELD_DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    outcome: StopOutcome
    task: Task
    held_delivery_id: str
    def __init__(self, outcome: _Optional[_Union[StopOutcome, str]] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., held_delivery_id: _Optional[str] = ...) -> None: ...

class WatchTasksRequest(_message.Message):
    __slots__ = ("parent_session_id", "after_change_seq")
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_CHANGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    parent_session_id: str
    after_change_seq: int
    def __init__(self, parent_session_id: _Optional[str] = ..., after_change_seq: _Optional[int] = ...) -> None: ...

class WatchTasksResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class AckTaskResultRequest(_message.Message):
    __slots__ = ("task_id", "delivery_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    delivery_id: str
    def __init__(self, task_id: _Optional[str] = ..., delivery_id: _Optional[str] = ...) -> None: ...

class AckTaskResultResponse(_message.Message):
    __slots__ = ("acknowledged",)
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    acknowledged: bool
    def __init__(self, acknowledged: _Optional[bool] = ...) -> None: ...
