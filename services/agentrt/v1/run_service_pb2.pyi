import datetime

from agentrt.v1 import common_pb2 as _common_pb2
from agentrt.v1 import tool_service_pb2 as _tool_service_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolCallMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_MODE_UNSPECIFIED: _ClassVar[ToolCallMode]
    TOOL_CALL_MODE_PARALLEL: _ClassVar[ToolCallMode]
    TOOL_CALL_MODE_SINGLE: _ClassVar[ToolCallMode]

class GuardrailStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUARDRAIL_STAGE_UNSPECIFIED: _ClassVar[GuardrailStage]
    GUARDRAIL_STAGE_INPUT: _ClassVar[GuardrailStage]
    GUARDRAIL_STAGE_OUTPUT: _ClassVar[GuardrailStage]
    GUARDRAIL_STAGE_TOOL_INPUT: _ClassVar[GuardrailStage]
    GUARDRAIL_STAGE_TOOL_OUTPUT: _ClassVar[GuardrailStage]

class GuardrailInputMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUARDRAIL_INPUT_MODE_UNSPECIFIED: _ClassVar[GuardrailInputMode]
    GUARDRAIL_INPUT_MODE_RACING: _ClassVar[GuardrailInputMode]
    GUARDRAIL_INPUT_MODE_BLOCKING: _ClassVar[GuardrailInputMode]

class GuardrailDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUARDRAIL_DECISION_UNSPECIFIED: _ClassVar[GuardrailDecision]
    GUARDRAIL_DECISION_ALLOW: _ClassVar[GuardrailDecision]
    GUARDRAIL_DECISION_REPLACE: _ClassVar[GuardrailDecision]
    GUARDRAIL_DECISION_TRIP: _ClassVar[GuardrailDecision]

class OutputStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_STRATEGY_UNSPECIFIED: _ClassVar[OutputStrategy]
    OUTPUT_STRATEGY_AUTO: _ClassVar[OutputStrategy]
    OUTPUT_STRATEGY_NATIVE: _ClassVar[OutputStrategy]
    OUTPUT_STRATEGY_TOOL: _ClassVar[OutputStrategy]

class ErrorHandlerAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_HANDLER_ACTION_UNSPECIFIED: _ClassVar[ErrorHandlerAction]
    ERROR_HANDLER_ACTION_FAIL: _ClassVar[ErrorHandlerAction]
    ERROR_HANDLER_ACTION_FALLBACK: _ClassVar[ErrorHandlerAction]

class SuspensionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUSPENSION_REASON_UNSPECIFIED: _ClassVar[SuspensionReason]
    SUSPENSION_REASON_PENDING_CALLS: _ClassVar[SuspensionReason]
    SUSPENSION_REASON_RECONCILIATION: _ClassVar[SuspensionReason]

class PendingCallKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PENDING_CALL_KIND_UNSPECIFIED: _ClassVar[PendingCallKind]
    PENDING_CALL_KIND_APPROVAL: _ClassVar[PendingCallKind]
    PENDING_CALL_KIND_EXTERNAL_RESULT: _ClassVar[PendingCallKind]
    PENDING_CALL_KIND_RECONCILIATION: _ClassVar[PendingCallKind]

class DecisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_KIND_UNSPECIFIED: _ClassVar[DecisionKind]
    DECISION_KIND_TOOL_CALLS: _ClassVar[DecisionKind]
    DECISION_KIND_FINAL: _ClassVar[DecisionKind]
    DECISION_KIND_NO_TOOL_CALL: _ClassVar[DecisionKind]
    DECISION_KIND_TRUNCATED: _ClassVar[DecisionKind]
    DECISION_KIND_REFUSAL: _ClassVar[DecisionKind]

class ReconciliationAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECONCILIATION_ACTION_UNSPECIFIED: _ClassVar[ReconciliationAction]
    RECONCILIATION_ACTION_RUN_AGAIN: _ClassVar[ReconciliationAction]
    RECONCILIATION_ACTION_SUPPLY_RESULT: _ClassVar[ReconciliationAction]
    RECONCILIATION_ACTION_FAIL: _ClassVar[ReconciliationAction]

class InjectionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INJECTION_KIND_UNSPECIFIED: _ClassVar[InjectionKind]
    INJECTION_KIND_STEER: _ClassVar[InjectionKind]
    INJECTION_KIND_NEXT_TURN: _ClassVar[InjectionKind]
    INJECTION_KIND_FOLLOW_UP: _ClassVar[InjectionKind]
TOOL_CALL_MODE_UNSPECIFIED: ToolCallMode
TOOL_CALL_MODE_PARALLEL: ToolCallMode
TOOL_CALL_MODE_SINGLE: ToolCallMode
GUARDRAIL_STAGE_UNSPECIFIED: GuardrailStage
GUARDRAIL_STAGE_INPUT: GuardrailStage
GUARDRAIL_STAGE_OUTPUT: GuardrailStage
GUARDRAIL_STAGE_TOOL_INPUT: GuardrailStage
GUARDRAIL_STAGE_TOOL_OUTPUT: GuardrailStage
GUARDRAIL_INPUT_MODE_UNSPECIFIED: GuardrailInputMode
GUARDRAIL_INPUT_MODE_RACING: GuardrailInputMode
GUARDRAIL_INPUT_MODE_BLOCKING: GuardrailInputMode
GUARDRAIL_DECISION_UNSPECIFIED: GuardrailDecision
GUARDRAIL_DECISION_ALLOW: GuardrailDecision
GUARDRAIL_DECISION_REPLACE: GuardrailDecision
GUARDRAIL_DECISION_TRIP: GuardrailDecision
OUTPUT_STRATEGY_UNSPECIFIED: OutputStrategy
OUTPUT_STRATEGY_AUTO: OutputStrategy
OUTPUT_STRATEGY_NATIVE: OutputStrategy
OUTPUT_STRATEGY_TOOL: OutputStrategy
ERROR_HANDLER_ACTION_UNSPECIFIED: ErrorHandlerAction
ERROR_HANDLER_ACTION_FAIL: ErrorHandlerAction
ERROR_HANDLER_ACTION_FALLBACK: ErrorHandlerAction
SUSPENSION_REASON_UNSPECIFIED: SuspensionReason
SUSPENSION_REASON_PENDING_CALLS: SuspensionReason
SUSPENSION_REASON_RECONCILIATION: SuspensionReason
PENDING_CALL_KIND_UNSPECIFIED: PendingCallKind
PENDING_CALL_KIND_APPROVAL: PendingCallKind
PENDING_CALL_KIND_EXTERNAL_RESULT: PendingCallKind
PENDING_CALL_KIND_RECONCILIATION: PendingCallKind
DECISION_KIND_UNSPECIFIED: DecisionKind
DECISION_KIND_TOOL_CALLS: DecisionKind
DECISION_KIND_FINAL: DecisionKind
DECISION_KIND_NO_TOOL_CALL: DecisionKind
DECISION_KIND_TRUNCATED: DecisionKind
DECISION_KIND_REFUSAL: DecisionKind
RECONCILIATION_ACTION_UNSPECIFIED: ReconciliationAction
RECONCILIATION_ACTION_RUN_AGAIN: ReconciliationAction
RECONCILIATION_ACTION_SUPPLY_RESULT: ReconciliationAction
RECONCILIATION_ACTION_FAIL: ReconciliationAction
INJECTION_KIND_UNSPECIFIED: InjectionKind
INJECTION_KIND_STEER: InjectionKind
INJECTION_KIND_NEXT_TURN: InjectionKind
INJECTION_KIND_FOLLOW_UP: InjectionKind

class AgentLimits(_message.Message):
    __slots__ = ("max_turns", "max_consecutive_error_turns", "max_tool_concurrency", "max_tool_calls", "time_budget")
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONSECUTIVE_ERROR_TURNS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TIME_BUDGET_FIELD_NUMBER: _ClassVar[int]
    max_turns: int
    max_consecutive_error_turns: int
    max_tool_concurrency: int
    max_tool_calls: int
    time_budget: _duration_pb2.Duration
    def __init__(self, max_turns: _Optional[int] = ..., max_consecutive_error_turns: _Optional[int] = ..., max_tool_concurrency: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., time_budget: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AgentTool(_message.Message):
    __slots__ = ("name", "needs_approval", "timeout", "spec", "command_policy", "agent_name", "agent_version", "description", "guardrails", "sequential", "deferred", "terminates_run")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEEDS_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    COMMAND_POLICY_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    GUARDRAILS_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    TERMINATES_RUN_FIELD_NUMBER: _ClassVar[int]
    name: str
    needs_approval: bool
    timeout: _duration_pb2.Duration
    spec: _common_pb2.ToolSpec
    command_policy: _common_pb2.CommandPolicy
    agent_name: str
    agent_version: int
    description: str
    guardrails: _containers.RepeatedCompositeFieldContainer[Guardrail]
    sequential: bool
    deferred: bool
    terminates_run: bool
    def __init__(self, name: _Optional[str] = ..., needs_approval: _Optional[bool] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., spec: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ..., command_policy: _Optional[_Union[_common_pb2.CommandPolicy, _Mapping]] = ..., agent_name: _Optional[str] = ..., agent_version: _Optional[int] = ..., description: _Optional[str] = ..., guardrails: _Optional[_Iterable[_Union[Guardrail, _Mapping]]] = ..., sequential: _Optional[bool] = ..., deferred: _Optional[bool] = ..., terminates_run: _Optional[bool] = ...) -> None: ...

class HandoffInputFilter(_message.Message):
    __slots__ = ("drop_tool_calls", "keep_last_turns")
    DROP_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_TURNS_FIELD_NUMBER: _ClassVar[int]
    drop_tool_calls: bool
    keep_last_turns: int
    def __init__(self, drop_tool_calls: _Optional[bool] = ..., keep_last_turns: _Optional[int] = ...) -> None: ...

class Handoff(_message.Message):
    __slots__ = ("agent_name", "agent_version", "tool_name", "tool_description", "input_json_schema", "input_filter")
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    INPUT_FILTER_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    agent_version: int
    tool_name: str
    tool_description: str
    input_json_schema: str
    input_filter: HandoffInputFilter
    def __init__(self, agent_name: _Optional[str] = ..., agent_version: _Optional[int] = ..., tool_name: _Optional[str] = ..., tool_description: _Optional[str] = ..., input_json_schema: _Optional[str] = ..., input_filter: _Optional[_Union[HandoffInputFilter, _Mapping]] = ...) -> None: ...

class PatternGuardrail(_message.Message):
    __slots__ = ("patterns", "on_match", "replacement", "message")
    PATTERNS_FIELD_NUMBER: _ClassVar[int]
    ON_MATCH_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    patterns: _containers.RepeatedScalarFieldContainer[str]
    on_match: GuardrailDecision
    replacement: str
    message: str
    def __init__(self, patterns: _Optional[_Iterable[str]] = ..., on_match: _Optional[_Union[GuardrailDecision, str]] = ..., replacement: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ModelGuardrail(_message.Message):
    __slots__ = ("model", "prompt", "max_output_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    prompt: str
    max_output_tokens: int
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., prompt: _Optional[str] = ..., max_output_tokens: _Optional[int] = ...) -> None: ...

class Guardrail(_message.Message):
    __slots__ = ("name", "stages", "input_mode", "pattern", "model")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    INPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    stages: _containers.RepeatedScalarFieldContainer[GuardrailStage]
    input_mode: GuardrailInputMode
    pattern: PatternGuardrail
    model: ModelGuardrail
    def __init__(self, name: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[GuardrailStage, str]]] = ..., input_mode: _Optional[_Union[GuardrailInputMode, str]] = ..., pattern: _Optional[_Union[PatternGuardrail, _Mapping]] = ..., model: _Optional[_Union[ModelGuardrail, _Mapping]] = ...) -> None: ...

class GuardrailResult(_message.Message):
    __slots__ = ("guardrail", "stage", "decision", "message", "call_id", "error", "scope", "duration", "usage")
    GUARDRAIL_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    guardrail: str
    stage: GuardrailStage
    decision: GuardrailDecision
    message: str
    call_id: str
    error: str
    scope: str
    duration: _duration_pb2.Duration
    usage: _common_pb2.Usage
    def __init__(self, guardrail: _Optional[str] = ..., stage: _Optional[_Union[GuardrailStage, str]] = ..., decision: _Optional[_Union[GuardrailDecision, str]] = ..., message: _Optional[str] = ..., call_id: _Optional[str] = ..., error: _Optional[str] = ..., scope: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class ErrorHandler(_message.Message):
    __slots__ = ("action", "fallback_message")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    action: ErrorHandlerAction
    fallback_message: str
    def __init__(self, action: _Optional[_Union[ErrorHandlerAction, str]] = ..., fallback_message: _Optional[str] = ...) -> None: ...

class ErrorHandlers(_message.Message):
    __slots__ = ("max_turns", "refusal", "invalid_final_output")
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    INVALID_FINAL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    max_turns: ErrorHandler
    refusal: ErrorHandler
    invalid_final_output: ErrorHandler
    def __init__(self, max_turns: _Optional[_Union[ErrorHandler, _Mapping]] = ..., refusal: _Optional[_Union[ErrorHandler, _Mapping]] = ..., invalid_final_output: _Optional[_Union[ErrorHandler, _Mapping]] = ...) -> None: ...

class RunSandbox(_message.Message):
    __slots__ = ("backend", "image", "env", "user", "network", "limits")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    backend: _tool_service_pb2.SandboxBackend
    image: str
    env: _containers.ScalarMap[str, str]
    user: str
    network: str
    limits: _tool_service_pb2.SandboxLimits
    def __init__(self, backend: _Optional[_Union[_tool_service_pb2.SandboxBackend, str]] = ..., image: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., network: _Optional[str] = ..., limits: _Optional[_Union[_tool_service_pb2.SandboxLimits, _Mapping]] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("name", "version", "instructions", "model", "settings", "tools", "handoffs", "output_json_schema", "limits", "tool_call_mode", "recent_results", "result_max_bytes", "handoff_targets", "guardrails", "output_strategy", "final_turn_without_tools", "error_handlers", "sandbox", "compaction", "max_overflow_retries", "default_tools")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    HANDOFFS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_MODE_FIELD_NUMBER: _ClassVar[int]
    RECENT_RESULTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_TARGETS_FIELD_NUMBER: _ClassVar[int]
    GUARDRAILS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FINAL_TURN_WITHOUT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    ERROR_HANDLERS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    MAX_OVERFLOW_RETRIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    instructions: str
    model: _common_pb2.ModelRef
    settings: _common_pb2.ModelSettings
    tools: _containers.RepeatedCompositeFieldContainer[AgentTool]
    handoffs: _containers.RepeatedScalarFieldContainer[str]
    output_json_schema: str
    limits: AgentLimits
    tool_call_mode: ToolCallMode
    recent_results: int
    result_max_bytes: int
    handoff_targets: _containers.RepeatedCompositeFieldContainer[Handoff]
    guardrails: _containers.RepeatedCompositeFieldContainer[Guardrail]
    output_strategy: OutputStrategy
    final_turn_without_tools: bool
    error_handlers: ErrorHandlers
    sandbox: RunSandbox
    compaction: CompactionPolicy
    max_overflow_retries: int
    default_tools: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., instructions: _Optional[str] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., settings: _Optional[_Union[_common_pb2.ModelSettings, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[AgentTool, _Mapping]]] = ..., handoffs: _Optional[_Iterable[str]] = ..., output_json_schema: _Optional[str] = ..., limits: _Optional[_Union[AgentLimits, _Mapping]] = ..., tool_call_mode: _Optional[_Union[ToolCallMode, str]] = ..., recent_results: _Optional[int] = ..., result_max_bytes: _Optional[int] = ..., handoff_targets: _Optional[_Iterable[_Union[Handoff, _Mapping]]] = ..., guardrails: _Optional[_Iterable[_Union[Guardrail, _Mapping]]] = ..., output_strategy: _Optional[_Union[OutputStrategy, str]] = ..., final_turn_without_tools: _Optional[bool] = ..., error_handlers: _Optional[_Union[ErrorHandlers, _Mapping]] = ..., sandbox: _Optional[_Union[RunSandbox, _Mapping]] = ..., compaction: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., max_overflow_retries: _Optional[int] = ..., default_tools: _Optional[bool] = ...) -> None: ...

class CompactionPolicy(_message.Message):
    __slots__ = ("context_window_tokens", "trigger_input_tokens", "trigger_turns", "keep_turns", "summary_model", "summary_max_output_tokens", "count_tokens")
    CONTEXT_WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TURNS_FIELD_NUMBER: _ClassVar[int]
    KEEP_TURNS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_MODEL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COUNT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    context_window_tokens: int
    trigger_input_tokens: int
    trigger_turns: int
    keep_turns: int
    summary_model: _common_pb2.ModelRef
    summary_max_output_tokens: int
    count_tokens: bool
    def __init__(self, context_window_tokens: _Optional[int] = ..., trigger_input_tokens: _Optional[int] = ..., trigger_turns: _Optional[int] = ..., keep_turns: _Optional[int] = ..., summary_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., summary_max_output_tokens: _Optional[int] = ..., count_tokens: _Optional[bool] = ...) -> None: ...

class RegisterAgentRequest(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: AgentSpec
    def __init__(self, agent: _Optional[_Union[AgentSpec, _Mapping]] = ...) -> None: ...

class RegisterAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: AgentSpec
    def __init__(self, agent: _Optional[_Union[AgentSpec, _Mapping]] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: AgentSpec
    def __init__(self, agent: _Optional[_Union[AgentSpec, _Mapping]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("agent_name", "agent_version", "agent", "input", "session_id", "workspace", "labels", "idempotency_key", "sandbox")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    agent_version: int
    agent: AgentSpec
    input: str
    session_id: str
    workspace: str
    labels: _containers.ScalarMap[str, str]
    idempotency_key: str
    sandbox: RunSandbox
    def __init__(self, agent_name: _Optional[str] = ..., agent_version: _Optional[int] = ..., agent: _Optional[_Union[AgentSpec, _Mapping]] = ..., input: _Optional[str] = ..., session_id: _Optional[str] = ..., workspace: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., idempotency_key: _Optional[str] = ..., sandbox: _Optional[_Union[RunSandbox, _Mapping]] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run_id", "session_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session_id: str
    def __init__(self, run_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "session_id", "agent_name", "agent_version", "status", "phase", "turns", "usage", "final_output", "failure", "pending_calls", "labels", "create_time", "update_time", "workspace", "parent_run_id", "parent_call_id", "nested_usage", "current_agent_name", "current_agent_version", "disclosed_tools", "stop_requested", "child_run_ids", "sandbox_id", "suspension_reason", "pending_input", "diagnostics", "overflow_retries")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NESTED_USAGE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CURRENT_AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DISCLOSED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SUSPENSION_REASON_FIELD_NUMBER: _ClassVar[int]
    PENDING_INPUT_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    OVERFLOW_RETRIES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session_id: str
    agent_name: str
    agent_version: int
    status: _common_pb2.RunStatus
    phase: _common_pb2.RunPhase
    turns: int
    usage: _common_pb2.Usage
    final_output: str
    failure: _common_pb2.FailureInfo
    pending_calls: _containers.RepeatedCompositeFieldContainer[PendingCall]
    labels: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    workspace: str
    parent_run_id: str
    parent_call_id: str
    nested_usage: _common_pb2.Usage
    current_agent_name: str
    current_agent_version: int
    disclosed_tools: _containers.RepeatedScalarFieldContainer[str]
    stop_requested: bool
    child_run_ids: _containers.RepeatedScalarFieldContainer[str]
    sandbox_id: str
    suspension_reason: SuspensionReason
    pending_input: _containers.RepeatedCompositeFieldContainer[InjectedInput]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    overflow_retries: int
    def __init__(self, run_id: _Optional[str] = ..., session_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., agent_version: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., phase: _Optional[_Union[_common_pb2.RunPhase, str]] = ..., turns: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., final_output: _Optional[str] = ..., failure: _Optional[_Union[_common_pb2.FailureInfo, _Mapping]] = ..., pending_calls: _Optional[_Iterable[_Union[PendingCall, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., workspace: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., parent_call_id: _Optional[str] = ..., nested_usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., current_agent_name: _Optional[str] = ..., current_agent_version: _Optional[int] = ..., disclosed_tools: _Optional[_Iterable[str]] = ..., stop_requested: _Optional[bool] = ..., child_run_ids: _Optional[_Iterable[str]] = ..., sandbox_id: _Optional[str] = ..., suspension_reason: _Optional[_Union[SuspensionReason, str]] = ..., pending_input: _Optional[_Iterable[_Union[InjectedInput, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ..., overflow_retries: _Optional[int] = ...) -> None: ...

class InjectedInput(_message.Message):
    __slots__ = ("id", "kind", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: InjectionKind
    text: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[InjectionKind, str]] = ..., text: _Optional[str] = ...) -> None: ...

class PendingCall(_message.Message):
    __slots__ = ("call", "kind", "run_id", "parent_call_id", "reason")
    CALL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call: _common_pb2.ToolCall
    kind: PendingCallKind
    run_id: str
    parent_call_id: str
    reason: str
    def __init__(self, call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., kind: _Optional[_Union[PendingCallKind, str]] = ..., run_id: _Optional[str] = ..., parent_call_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StreamRunEventsRequest(_message.Message):
    __slots__ = ("run_id", "session_id", "after_seq", "batch_events")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    BATCH_EVENTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session_id: str
    after_seq: int
    batch_events: bool
    def __init__(self, run_id: _Optional[str] = ..., session_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., batch_events: _Optional[bool] = ...) -> None: ...

class StreamRunEventsResponse(_message.Message):
    __slots__ = ("event", "more_events")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MORE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    event: RunEvent
    more_events: _containers.RepeatedCompositeFieldContainer[RunEvent]
    def __init__(self, event: _Optional[_Union[RunEvent, _Mapping]] = ..., more_events: _Optional[_Iterable[_Union[RunEvent, _Mapping]]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("seq", "run_id", "time", "turn", "provisional", "run_started", "phase_changed", "turn_started", "model_delta", "model_responded", "tool_called", "tool_progressed", "tool_returned", "run_suspended", "items_persisted", "diagnostic", "run_completed", "gap", "stream_end", "run_resumed", "handoff_requested", "child_run_linked", "guardrail_result", "stop_requested", "tools_disclosed")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    PROVISIONAL_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    PHASE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    TURN_STARTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_DELTA_FIELD_NUMBER: _ClassVar[int]
    MODEL_RESPONDED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLED_FIELD_NUMBER: _ClassVar[int]
    TOOL_PROGRESSED_FIELD_NUMBER: _ClassVar[int]
    TOOL_RETURNED_FIELD_NUMBER: _ClassVar[int]
    RUN_SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_PERSISTED_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTIC_FIELD_NUMBER: _ClassVar[int]
    RUN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    STREAM_END_FIELD_NUMBER: _ClassVar[int]
    RUN_RESUMED_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_LINKED_FIELD_NUMBER: _ClassVar[int]
    GUARDRAIL_RESULT_FIELD_NUMBER: _ClassVar[int]
    STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TOOLS_DISCLOSED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    run_id: str
    time: _timestamp_pb2.Timestamp
    turn: int
    provisional: bool
    run_started: RunStarted
    phase_changed: PhaseChanged
    turn_started: TurnStarted
    model_delta: ModelDelta
    model_responded: ModelResponded
    tool_called: ToolCalled
    tool_progressed: ToolProgressed
    tool_returned: ToolReturned
    run_suspended: RunSuspended
    items_persisted: ItemsPersisted
    diagnostic: Diagnostic
    run_completed: RunCompleted
    gap: EventGap
    stream_end: StreamEnd
    run_resumed: RunResumed
    handoff_requested: HandoffRequested
    child_run_linked: ChildRunLinked
    guardrail_result: GuardrailResult
    stop_requested: StopRequested
    tools_disclosed: ToolsDisclosed
    def __init__(self, seq: _Optional[int] = ..., run_id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., turn: _Optional[int] = ..., provisional: _Optional[bool] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., phase_changed: _Optional[_Union[PhaseChanged, _Mapping]] = ..., turn_started: _Optional[_Union[TurnStarted, _Mapping]] = ..., model_delta: _Optional[_Union[ModelDelta, _Mapping]] = ..., model_responded: _Optional[_Union[ModelResponded, _Mapping]] = ..., tool_called: _Optional[_Union[ToolCalled, _Mapping]] = ..., tool_progressed: _Optional[_Union[ToolProgressed, _Mapping]] = ..., tool_returned: _Optional[_Union[ToolReturned, _Mapping]] = ..., run_suspended: _Optional[_Union[RunSuspended, _Mapping]] = ..., items_persisted: _Optional[_Union[ItemsPersisted, _Mapping]] = ..., diagnostic: _Optional[_Union[Diagnostic, _Mapping]] = ..., run_completed: _Optional[_Union[RunCompleted, _Mapping]] = ..., gap: _Optional[_Union[EventGap, _Mapping]] = ..., stream_end: _Optional[_Union[StreamEnd, _Mapping]] = ..., run_resumed: _Optional[_Union[RunResumed, _Mapping]] = ..., handoff_requested: _Optional[_Union[HandoffRequested, _Mapping]] = ..., child_run_linked: _Optional[_Union[ChildRunLinked, _Mapping]] = ..., guardrail_result: _Optional[_Union[GuardrailResult, _Mapping]] = ..., stop_requested: _Optional[_Union[StopRequested, _Mapping]] = ..., tools_disclosed: _Optional[_Union[ToolsDisclosed, _Mapping]] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("agent_name", "session_id", "input", "model")
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    session_id: str
    input: str
    model: _common_pb2.ModelRef
    def __init__(self, agent_name: _Optional[str] = ..., session_id: _Optional[str] = ..., input: _Optional[str] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class PhaseChanged(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _common_pb2.RunPhase
    def __init__(self, phase: _Optional[_Union[_common_pb2.RunPhase, str]] = ...) -> None: ...

class TurnStarted(_message.Message):
    __slots__ = ("turn",)
    TURN_FIELD_NUMBER: _ClassVar[int]
    turn: int
    def __init__(self, turn: _Optional[int] = ...) -> None: ...

class ModelDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ModelResponded(_message.Message):
    __slots__ = ("response", "decision", "reason")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    response: _common_pb2.ModelResponse
    decision: DecisionKind
    reason: str
    def __init__(self, response: _Optional[_Union[_common_pb2.ModelResponse, _Mapping]] = ..., decision: _Optional[_Union[DecisionKind, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ToolCalled(_message.Message):
    __slots__ = ("call", "handoff")
    CALL_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    call: _common_pb2.ToolCall
    handoff: bool
    def __init__(self, call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., handoff: _Optional[bool] = ...) -> None: ...

class HandoffRequested(_message.Message):
    __slots__ = ("call_id", "from_agent", "to_agent", "to_agent_version", "arguments", "ignored_call_ids")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_AGENT_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IGNORED_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    from_agent: str
    to_agent: str
    to_agent_version: int
    arguments: str
    ignored_call_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, call_id: _Optional[str] = ..., from_agent: _Optional[str] = ..., to_agent: _Optional[str] = ..., to_agent_version: _Optional[int] = ..., arguments: _Optional[str] = ..., ignored_call_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ChildRunLinked(_message.Message):
    __slots__ = ("call_id", "child_run_id", "agent_name", "agent_version", "session_id")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    child_run_id: str
    agent_name: str
    agent_version: int
    session_id: str
    def __init__(self, call_id: _Optional[str] = ..., child_run_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., agent_version: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class StopRequested(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ToolsDisclosed(_message.Message):
    __slots__ = ("call_id", "names")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, call_id: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolProgressed(_message.Message):
    __slots__ = ("call_id", "stream", "text")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    stream: str
    text: str
    def __init__(self, call_id: _Optional[str] = ..., stream: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ToolReturned(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.ToolResult
    def __init__(self, result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class RunSuspended(_message.Message):
    __slots__ = ("pending_calls", "reason")
    PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    pending_calls: _containers.RepeatedCompositeFieldContainer[PendingCall]
    reason: SuspensionReason
    def __init__(self, pending_calls: _Optional[_Iterable[_Union[PendingCall, _Mapping]]] = ..., reason: _Optional[_Union[SuspensionReason, str]] = ...) -> None: ...

class RunResumed(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: int
    def __init__(self, decisions: _Optional[int] = ...) -> None: ...

class ItemsPersisted(_message.Message):
    __slots__ = ("last_seq", "entries")
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    last_seq: int
    entries: int
    def __init__(self, last_seq: _Optional[int] = ..., entries: _Optional[int] = ...) -> None: ...

class Diagnostic(_message.Message):
    __slots__ = ("code", "message", "turn", "details_json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    turn: int
    details_json: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., turn: _Optional[int] = ..., details_json: _Optional[str] = ...) -> None: ...

class RunCompleted(_message.Message):
    __slots__ = ("status", "phase", "final_output", "failure", "usage", "turns", "labels", "unconsumed_input")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    UNCONSUMED_INPUT_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.RunStatus
    phase: _common_pb2.RunPhase
    final_output: str
    failure: _common_pb2.FailureInfo
    usage: _common_pb2.Usage
    turns: int
    labels: _containers.ScalarMap[str, str]
    unconsumed_input: _containers.RepeatedCompositeFieldContainer[InjectedInput]
    def __init__(self, status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., phase: _Optional[_Union[_common_pb2.RunPhase, str]] = ..., final_output: _Optional[str] = ..., failure: _Optional[_Union[_common_pb2.FailureInfo, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., turns: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., unconsumed_input: _Optional[_Iterable[_Union[InjectedInput, _Mapping]]] = ...) -> None: ...

class EventGap(_message.Message):
    __slots__ = ("last_good", "dropped", "next", "at_end")
    LAST_GOOD_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    AT_END_FIELD_NUMBER: _ClassVar[int]
    last_good: int
    dropped: int
    next: int
    at_end: bool
    def __init__(self, last_good: _Optional[int] = ..., dropped: _Optional[int] = ..., next: _Optional[int] = ..., at_end: _Optional[bool] = ...) -> None: ...

class StreamEnd(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.RunStatus
    def __init__(self, status: _Optional[_Union[_common_pb2.RunStatus, str]] = ...) -> None: ...

class ApprovalDecision(_message.Message):
    __slots__ = ("call_id", "approved", "message", "always")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ALWAYS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    approved: bool
    message: str
    always: bool
    def __init__(self, call_id: _Optional[str] = ..., approved: _Optional[bool] = ..., message: _Optional[str] = ..., always: _Optional[bool] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("run_id", "decisions", "results", "reconciliations")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RECONCILIATIONS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    decisions: _containers.RepeatedCompositeFieldContainer[ApprovalDecision]
    results: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolResult]
    reconciliations: _containers.RepeatedCompositeFieldContainer[Reconciliation]
    def __init__(self, run_id: _Optional[str] = ..., decisions: _Optional[_Iterable[_Union[ApprovalDecision, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[_common_pb2.ToolResult, _Mapping]]] = ..., reconciliations: _Optional[_Iterable[_Union[Reconciliation, _Mapping]]] = ...) -> None: ...

class Reconciliation(_message.Message):
    __slots__ = ("call_id", "action", "result", "message")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    action: ReconciliationAction
    result: _common_pb2.ToolResult
    message: str
    def __init__(self, call_id: _Optional[str] = ..., action: _Optional[_Union[ReconciliationAction, str]] = ..., result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class ResumeRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class InjectInputRequest(_message.Message):
    __slots__ = ("run_id", "text", "kind")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    text: str
    kind: InjectionKind
    def __init__(self, run_id: _Optional[str] = ..., text: _Optional[str] = ..., kind: _Optional[_Union[InjectionKind, str]] = ...) -> None: ...

class InjectInputResponse(_message.Message):
    __slots__ = ("position",)
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: int
    def __init__(self, position: _Optional[int] = ...) -> None: ...

class StopAfterTurnRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StopAfterTurnResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...
