"""What a parent run and its child runs keep about each other (004 §2.8, §2.2 step 6, §2.7f; 002 run tree).

The values of agents as tools that outlive a batch, shared by the loop's half
(runs/loop/phases/child/calls.py) and the manager's (runs/lifecycle/child_runs.py): the
state keys of a parent and of a child, a child's idempotency key, a finished child as its
call's result, a suspended child's pending calls as the parent shows them, and the nested
usage folded into the parent's total. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt.core import agent_tools
from agentrt.runs.domain import RunRecord
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: State keys. A child's: PARENT_RUN_ID, PARENT_CALL_ID. A parent's: CHILD_RUN_IDS (in order
#: of start), NESTED (the nested part of its usage, `Tokens.to_dict`), CHILD_PENDING
#: ({child run id: [call ids]}, while it is suspended on children).
PARENT_RUN_ID, PARENT_CALL_ID = "parent_run_id", "parent_call_id"
#: A child's nesting depth (1 = a top-level run's child), in its state; absent = 0 (no parent).
CHILD_DEPTH = "child_depth"
CHILD_RUN_IDS, NESTED, CHILD_PENDING = "child_run_ids", "nested_usage", "child_pending"


def child_key(parent_run_id: str, call_id: str) -> str:
    """Return the idempotency key of the child run of (parent run, call).

    It opens with U+001E, a control character StartRun refuses in a client's key, so a
    client can never take (or guess its way into) a child's key.
    """
    return f"\x1echild:{parent_run_id}:{call_id}"


def finished_result(call_id: str, name: str, child: RunRecord) -> cpb.ToolResult:
    """Return the call's result from its finished child (004 §2.8; 002 RunLink)."""
    status: dict[int, str] = {cpb.RUN_STATUS_COMPLETED: "completed", cpb.RUN_STATUS_CANCELED: "canceled"}
    message = child.failure.message if child.failure is not None else ""
    content, is_error = agent_tools.child_result(
        status.get(child.status, "failed"), child.final_output, message
    )
    code = cpb.TOOL_RESULT_STATUS_OK
    if is_error:
        code = (
            cpb.TOOL_RESULT_STATUS_INTERRUPTED
            if child.status == cpb.RUN_STATUS_CANCELED
            else cpb.TOOL_RESULT_STATUS_ERROR
        )
    result = cpb.ToolResult(
        call_id=call_id,
        name=name,
        content=content,
        is_error=is_error,
        status=code,  # type: ignore[arg-type]
        summary=content.split("\n")[0][:120],
        child_run_id=child.run_id,
    )
    result.nested_usage.CopyFrom(child.usage)
    return result


def annotated(child: RunRecord) -> list[pb.PendingCall]:
    """Return a suspended child's pending calls as its parent shows them (run_id, parent_call_id).

    A grandchild's call keeps its own run_id (the run that waits) and parent_call_id.
    """
    out = []
    for p in child.pending:
        q = pb.PendingCall()
        q.CopyFrom(p)
        if not q.run_id:
            q.run_id, q.parent_call_id = child.run_id, str(child.state.get(PARENT_CALL_ID, ""))
        out.append(q)
    return out


def fold(
    usage: cpb.Usage, state: dict[str, Any], results: Sequence[cpb.ToolResult]
) -> tuple[cpb.Usage, dict[str, Any]]:
    """Fold the results' nested usage into the run's (004 §2.7f, §2.8); ({} when none).

    Returns:
        (the run's new total usage, the state values to write: NESTED), or (usage, {})
        when no result carries nested usage.
    """
    spent = agent_tools.Tokens()
    for x in results:
        if x.HasField("nested_usage"):
            spent = spent + _tokens(x.nested_usage)
    if spent == agent_tools.Tokens():
        return usage, {}
    before = agent_tools.RunUsage(_tokens(usage), agent_tools.Tokens.from_dict(state.get(NESTED, {})))
    after = before.add_nested(spent)
    total = cpb.Usage(**after.total.to_dict())
    return total, {NESTED: after.nested.to_dict()}


def _tokens(u: cpb.Usage) -> agent_tools.Tokens:
    return agent_tools.Tokens(
        max(0, u.input_tokens), max(0, u.output_tokens), max(0, u.cached_input_tokens),
        max(0, u.reasoning_tokens), max(0, u.requests),
    )  # fmt: skip
