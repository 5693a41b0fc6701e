"""What a tool batch answers for its calls when they did not run to their own result (004 §2.7).

`BatchResult` is a batch's outcome; the builders write the runtime's result for a call that
was refused, not started, cancelled while running or lost with its outcome unknown (each
text says which, so the model reads what happened); `not_run` answers a batch none of whose
calls could start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentrt.core.decide import Call
from agentrt.core.errors import MeshError
from agentrt.runs.loop.failures import RunFailed, ToolCallRefused
from agentrt.runs.loop.phases.tools import Planned, runtime_result
from agentrt.v1 import common_pb2 as cpb


@dataclass
class BatchResult:
    """The outcome of a batch: one result per planned call, in call order.

    Attributes:
        results: every call's result (the runtime's where a call could not report one).
        failure: the error that ends the run after the batch is recorded (lowest call
            index wins), or None.
        killed: why the batch was killed ("" when it was not).
    """

    results: list[cpb.ToolResult]
    failure: BaseException | None = None
    killed: str = ""


def cancelled_result(call: Call, why: str, journaled: cpb.ToolResult | None = None) -> cpb.ToolResult:
    """The result of a call killed while it ran (its side effects may have happened)."""
    text = f"Cancelled while running: partial effects possible ({why})."
    if journaled is not None and journaled.status == cpb.TOOL_RESULT_STATUS_OK:
        return journaled  # it finished before the cancel reached it
    result = runtime_result(call, text, cpb.TOOL_RESULT_STATUS_INTERRUPTED)
    if journaled is not None and journaled.content:
        result.content += "\n" + journaled.content
    return result


def not_executed_result(call: Call, why: str) -> cpb.ToolResult:
    """The result of a committed call that never started because the batch was stopped."""
    return runtime_result(call, f"Not executed: {why}.", cpb.TOOL_RESULT_STATUS_NOT_EXECUTED)


def not_run(
    planned: Sequence[Planned], failure: BaseException, why: str, on_result: Callable[[cpb.ToolResult], None]
) -> BatchResult:
    """Answer a batch none of whose calls could start (the run's sandbox could not be had).

    Every runnable call gets a "Not executed: <why>." result, the others their planned
    result, in call order, each passed to on_result; `failure` ends the run once the turn
    is recorded, as a tool service failing mid-batch does.
    """
    out = []
    for p in planned:
        result = not_executed_result(p.call, why) if p.runs or p.result is None else p.result
        on_result(result)
        out.append(result)
    return BatchResult(out, failure)


def refused_result(call: Call, refused: ToolCallRefused) -> cpb.ToolResult:
    """The result of a call the tool service refused before running it (it did not run; decision 0046)."""
    return runtime_result(
        call, f"The tool service refused this call: {refused.message}", cpb.TOOL_RESULT_STATUS_NOT_EXECUTED
    )


def unknown_outcome_result(call: Call, err: BaseException) -> cpb.ToolResult:
    """The result of a call whose execution failed in the infrastructure (outcome unknown)."""
    message = err.message if isinstance(err, MeshError) else str(err)
    if isinstance(err, RunFailed):
        message = err.failure.message
    return runtime_result(
        call,
        f"The tool service could not report this call's result, so its outcome is unknown: {message}",
        cpb.TOOL_RESULT_STATUS_INTERRUPTED,
    )
