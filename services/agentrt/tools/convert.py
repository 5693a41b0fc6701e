"""ToolService's proto <-> domain mappings (the servicer's translations, pure).

`tool_spec` and `tool_result` map the catalog and a call's outcome to their protos;
`execute_input` turns an ExecuteToolRequest into the executor's input (compiling the
request's command policy: a pattern that does not compile is INVALID_ARGUMENT/INVALID_VALUE);
`target` and `sandbox` map workspace targets and sandbox infos; the enum tables map states
and backends both ways.
"""

from __future__ import annotations

import json

from google.protobuf import duration_pb2

from agentrt.core.errors import Reason, invalid
from agentrt.core.policy import AGENT, CommandPolicy, PatternError, compile_policy, validate_patterns
from agentrt.mesh.durations import MAX_TOOL_TIMEOUT_SECONDS, seconds_of
from agentrt.tools.archive.transfer import Target
from agentrt.tools.calls.args import CallInput
from agentrt.tools.calls.catalog import ToolDef
from agentrt.tools.calls.results import Outcome, ResultStatus
from agentrt.tools.execution.request import ExecuteInput
from agentrt.tools.sandbox.spec import DOCKER, LOCAL, SandboxInfo
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

RESULT_STATUS = {
    ResultStatus.OK: common_pb2.TOOL_RESULT_STATUS_OK,
    ResultStatus.ERROR: common_pb2.TOOL_RESULT_STATUS_ERROR,
    ResultStatus.NOT_EXECUTED: common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED,
    ResultStatus.INTERRUPTED: common_pb2.TOOL_RESULT_STATUS_INTERRUPTED,
    ResultStatus.DENIED: common_pb2.TOOL_RESULT_STATUS_DENIED,
    ResultStatus.TIMED_OUT: common_pb2.TOOL_RESULT_STATUS_TIMED_OUT,
}
BACKEND_IN: dict[int, str] = {
    pb.SANDBOX_BACKEND_UNSPECIFIED: "",
    pb.SANDBOX_BACKEND_LOCAL: LOCAL,
    pb.SANDBOX_BACKEND_DOCKER: DOCKER,
}
BACKEND_OUT = {LOCAL: pb.SANDBOX_BACKEND_LOCAL, DOCKER: pb.SANDBOX_BACKEND_DOCKER}
SANDBOX_STATE = {
    "absent": pb.SANDBOX_STATE_ABSENT,
    "stopped": pb.SANDBOX_STATE_STOPPED,
    "running": pb.SANDBOX_STATE_RUNNING,
}
EXECUTION_STATE = {
    "absent": pb.EXECUTION_STATE_ABSENT,
    "started": pb.EXECUTION_STATE_STARTED,
    "finished": pb.EXECUTION_STATE_FINISHED,
}


def duration(seconds: float) -> duration_pb2.Duration:
    """A Duration of `seconds` (nanosecond precision)."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def tool_spec(tool: ToolDef) -> common_pb2.ToolSpec:
    """Map a catalog entry to its proto ToolSpec."""
    spec = common_pb2.ToolSpec(
        name=tool.name,
        description=tool.description,
        parameters_json_schema=json.dumps(tool.parameters),
        read_only=tool.read_only,
        retry_safe=tool.retry_safe,
        needs_approval=tool.needs_approval,
        sequential=tool.sequential,
        deferred=tool.deferred,
    )
    if tool.timeout_seconds:
        spec.timeout.CopyFrom(duration(tool.timeout_seconds))
    return spec


def tool_result(call_id: str, name: str, outcome: Outcome) -> common_pb2.ToolResult:
    """Map a domain outcome to the proto ToolResult."""
    return common_pb2.ToolResult(
        call_id=call_id,
        name=name,
        content=outcome.content,
        is_error=outcome.is_error,
        status=RESULT_STATUS[outcome.status],
        summary=outcome.summary,
        details_json=json.dumps(outcome.details, ensure_ascii=False) if outcome.details else "",
        exit_code=outcome.exit_code,
        output_truncated=outcome.output_truncated,
        duration=duration(outcome.duration_seconds),
    )


def request_policy(policy: common_pb2.CommandPolicy) -> CommandPolicy | None:
    """Compile a request's command policy; None when it has no patterns.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE naming the pattern that does not compile
            (bad caller input: nothing runs and nothing is recorded).
    """
    if not policy.allow and not policy.deny:
        return None
    try:
        validate_patterns(policy.allow, policy.deny)
    except PatternError as exc:
        raise invalid(
            Reason.INVALID_VALUE,
            f"command_policy.{exc}",
            field=f"command_policy.{exc.rule}",
            pattern=exc.pattern,
        ) from None
    return compile_policy(policy.allow, policy.deny, origin=AGENT)


def execute_input(request: pb.ExecuteToolRequest, service_policy: CommandPolicy) -> ExecuteInput:
    """The executor's input for an ExecuteToolRequest, the service's and the request's policies.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE (a request policy pattern that does not
            compile; a timeout that is negative or over MAX_TOOL_TIMEOUT_SECONDS).
    """
    call = request.call
    policies = [p for p in (service_policy, request_policy(request.command_policy)) if p and not p.empty]
    return ExecuteInput(
        run_id=request.run_id,
        call=CallInput(
            call.call_id, call.name, call.arguments, call.invalid_arguments, call.invalid_arguments_base64
        ),
        sandbox_id=request.sandbox_id,
        workspace=request.workspace,
        timeout_seconds=(
            seconds_of(request.timeout, "timeout", max_seconds=MAX_TOOL_TIMEOUT_SECONDS)
            if request.HasField("timeout")
            else 0.0
        ),
        max_output_bytes=request.max_output_bytes,
        command_policies=tuple(policies),
        attempt=request.attempt,
    )


def workspace_target(target: pb.WorkspaceTarget) -> Target:
    """The archive transfer's Target of a request's WorkspaceTarget (checked by the transfer)."""
    return Target(target.sandbox_id, target.workspace, target.run_id, target.path)


def sandbox_message(info: SandboxInfo) -> pb.Sandbox:
    """The proto Sandbox of a sandbox's info (an unknown backend is UNSPECIFIED)."""
    return pb.Sandbox(
        sandbox_id=info.sandbox_id,
        backend=BACKEND_OUT.get(info.backend, pb.SANDBOX_BACKEND_UNSPECIFIED),
        state=SANDBOX_STATE[info.state],
        workspace=info.workspace,
    )
