"""The tool phase of a turn: partition calls, then execute them (004 §2.2 steps 3–7, §2.7).

`plan_calls` decides, per call and in call order, what happens to it:
- the runtime answers it at once: an unknown tool ("Tool 'X' not found."), arguments that
  were not a JSON object or do not match the tool's whole schema (004 §2.7h: the problems
  with their JSON pointers, `core.tool_args.problems_text`), a denied approval, a result
  the client submitted for its own tool, or a call beyond the run's tool-call budget;
- it waits: for an approval (catalog or agent policy, unless approved "always") or for
  the client's result (a client-declared tool);
- it runs through the tool service.
If any call waits, the whole turn pauses and nothing runs (004 §2.2 step 4).

The command policy is checked BEFORE the approval gate (004 §2.7j, §2.7l): an exec_command
call whose arguments do not decode, or whose command the agent's `command_policy` refuses,
never waits for a person. It goes straight to the tool service, which refuses it as a
result naming the rule: the refusal has one code path (`agentrt.core.policy`, used by both
sides), and the tool service also applies its own policy, which the run loop cannot see
(a call only the service's policy refuses still waits for approval, then is refused).
A policy check that ran out of its time budget is not taken as proof either: the tool
service's own check might finish, so such a call waits for approval too.
Every exec_command request carries the agent's policy, so the tool service enforces it.

A call answered by a reconciliation (an interrupted side effect, runs/loop/reconcile.py) is
answered by it, or runs once more as a new attempt (RUN_AGAIN). `merge_answers` validates
and accumulates a resume's answers. Execution is runs/loop/phases/batch.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from agentrt.core.decide import Call
from agentrt.core.errors import Reason, invalid
from agentrt.core.exec_args import check_exec_call
from agentrt.core.policy import AGENT, compile_policy
from agentrt.core.tool_args import ArgumentCheck, check_arguments, problems_text
from agentrt.runs.convert.model import call_out
from agentrt.runs.domain import Answers, Resume
from agentrt.runs.loop import reconcile
from agentrt.runs.loop.persistence import RUNTIME_DETAILS
from agentrt.runs.spec import schemas
from agentrt.runs.spec.agents import EXEC_COMMAND
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

INVALID_ARGS_TEXT = (
    "The arguments of this call were not a valid JSON object, so the tool did not run. "
    "Send the call again with its arguments as one JSON object that matches the tool's schema."
)
BUDGET_TEXT = "The run's tool-call budget is spent, so this call did not run. Answer with what you have."
DENIED_TEXT = "A person denied this call, so it did not run."


def runtime_result(call: Call, content: str, status: int, *, is_error: bool = True) -> cpb.ToolResult:
    """Return a result the runtime writes for a call that did not reach the tool service."""
    return cpb.ToolResult(
        call_id=call.call_id,
        name=call.name,
        content=content,
        is_error=is_error,
        status=status,  # type: ignore[arg-type]
        summary=content.split(".")[0][:120],
        details_json=RUNTIME_DETAILS,
    )


@dataclass
class Planned:
    """What happens to one call: `result` set = answered; `pending` set = waits; else runs.

    `policy` is the agent's command policy for the call's tool, sent with the request.
    """

    call: Call
    spec: cpb.ToolSpec | None = None
    result: cpb.ToolResult | None = None
    pending: int = pb.PENDING_CALL_KIND_UNSPECIFIED
    policy: cpb.CommandPolicy | None = None
    #: The arguments' check against the tool's schema, once made (None: not made, or no schema).
    checked: ArgumentCheck | None = None

    @property
    def runs(self) -> bool:
        """True when the call goes to the tool service."""
        return self.result is None and self.pending == pb.PENDING_CALL_KIND_UNSPECIFIED


def plan_calls(
    calls: Sequence[Call],
    specs: Mapping[str, cpb.ToolSpec],
    always_approved: set[str],
    answers: Answers,
    budget_left: int | None,
    policies: Mapping[str, cpb.CommandPolicy] | None = None,
    preanswered: Mapping[str, cpb.ToolResult] | None = None,
) -> list[Planned]:
    """Partition calls (see the module docstring); pure.

    Args:
        calls: the decision's calls in call order.
        specs: offered tool specs by name (agent overrides applied).
        always_approved: tools approved for every later call of this run.
        answers: decisions and external results received so far.
        budget_left: calls the run may still execute; None = unlimited.
        policies: the agent's command policies by tool name (exec_command's).
        preanswered: results the loop gives calls itself, by call id (runtime-only calls:
            final_output made alongside other calls, handoffs); such a call never runs.
    """
    decisions, results, reconciled = answers.decisions, answers.results, answers.reconciliations
    policies = policies or {}
    out = []
    for call in calls:
        spec = specs.get(call.name)
        plan = Planned(call, spec, policy=policies.get(call.name))
        if preanswered and call.call_id in preanswered:
            plan.result = preanswered[call.call_id]
            out.append(plan)
            continue
        if call.call_id in reconciled:
            # An interrupted side effect answered by a person: RUN_AGAIN runs it once more
            # (a new attempt; it was approved before, if it needed to be), the others
            # answer it. The tool-call budget counted it the first time.
            plan.result = reconcile.answered_result(call, reconciled[call.call_id], RUNTIME_DETAILS)
            out.append(plan)
            continue
        if spec is not None and not call.has_invalid_arguments:
            plan.checked = _checked(call, spec)
        if spec is None:
            plan.result = runtime_result(call, f"Tool '{call.name}' not found.", cpb.TOOL_RESULT_STATUS_ERROR)
        elif call.has_invalid_arguments:
            plan.result = runtime_result(call, INVALID_ARGS_TEXT, cpb.TOOL_RESULT_STATUS_ERROR)
        elif plan.checked is not None and not plan.checked.ok:
            text = problems_text(call.name, plan.checked.problems)
            plan.result = runtime_result(call, text, cpb.TOOL_RESULT_STATUS_ERROR)
        elif spec.external:
            given = results.get(call.call_id)
            if given is None:
                plan.pending = pb.PENDING_CALL_KIND_EXTERNAL_RESULT
            else:
                plan.result = cpb.ToolResult()
                plan.result.CopyFrom(given)
                plan.result.name = call.name
                if plan.result.status == cpb.TOOL_RESULT_STATUS_UNSPECIFIED:
                    plan.result.status = (
                        cpb.TOOL_RESULT_STATUS_ERROR if given.is_error else cpb.TOOL_RESULT_STATUS_OK
                    )
        elif spec.needs_approval and call.name not in always_approved and not _refused_by_tool(plan):
            decision = decisions.get(call.call_id)
            if decision is None:
                plan.pending = pb.PENDING_CALL_KIND_APPROVAL
            elif not decision.approved:
                text = f"{DENIED_TEXT} {decision.message}".strip() if decision.message else DENIED_TEXT
                plan.result = runtime_result(call, text, cpb.TOOL_RESULT_STATUS_DENIED)
        if plan.runs and budget_left is not None:
            if budget_left <= 0:
                plan.result = runtime_result(call, BUDGET_TEXT, cpb.TOOL_RESULT_STATUS_NOT_EXECUTED)
            budget_left -= 1
        out.append(plan)
    return with_defaults(out)


def _checked(call: Call, spec: cpb.ToolSpec) -> ArgumentCheck | None:
    """Check a call's arguments against its tool's whole schema (004 §2.7h); None = no schema.

    A call whose schema declares defaults it left out travels with them filled in
    (`Planned.call` is replaced by the caller through `with_defaults`).
    """
    if not spec.parameters_json_schema:
        return None
    text = spec.parameters_json_schema
    return check_arguments(call.arguments, schemas.decoded(text), schemas.validator(text))


def with_defaults(planned: Sequence[Planned]) -> list[Planned]:
    """Return the plan with schema defaults applied to the arguments of the calls that travel.

    Only a call that runs or waits (approval, a client's result) is changed, and only when
    a default was actually added (core.tool_args: the model's exact text otherwise).
    """
    out = []
    for p in planned:
        if p.result is None and p.spec is not None:
            checked = p.checked if p.checked is not None else _checked(p.call, p.spec)
            if checked is not None and checked.defaults_applied:
                p = replace(p, call=replace(p.call, arguments=checked.arguments))
        out.append(p)
    return out


def _refused_by_tool(plan: Planned) -> bool:
    """True when exec_command will refuse the call as a result (policy veto or bad arguments).

    Such a call skips the approval gate (004 §2.7j, §2.7l): a person is never asked about
    a call the tool refuses anyway. The check is the tool service's own first check.
    """
    if plan.call.name != EXEC_COMMAND or plan.spec is None or plan.spec.external:
        return False
    policies = []
    if plan.policy is not None:
        policies.append(compile_policy(plan.policy.allow, plan.policy.deny, origin=AGENT))
    refusal = check_exec_call(plan.call.arguments, policies)
    # A check that ran out of time is no proof the tool service refuses too: ask (core.policy).
    return refusal is not None and refusal.definite


def pending_calls(planned: Sequence[Planned]) -> list[pb.PendingCall]:
    """Return the calls that wait, in call order."""
    return [pb.PendingCall(call=call_out(p.call), kind=p.pending) for p in planned if p.pending]  # type: ignore[arg-type]


def merge_answers(
    pending: Sequence[pb.PendingCall],
    previous: Answers,
    always_approved: Sequence[str],
    req: Resume,
) -> tuple[Answers, set[str]]:
    """Validate a resume's answers against the pending calls; merge them with earlier ones.

    Returns:
        (all answers so far, tool names approved for every later call).

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE for a call that is not pending with that
            kind, or answered twice in one request.
    """
    kinds = {p.call.call_id: (p.kind, p.call.name) for p in pending}
    seen: set[str] = set()

    def twice(call_id: str, field: str) -> None:
        if call_id in seen:
            raise invalid(Reason.INVALID_VALUE, f"call {call_id!r} is answered more than once in this "
                          "request; send one answer per call", field=field)  # fmt: skip

    merged = previous.copy()
    always = set(always_approved)
    for i, d in enumerate(req.decisions):
        twice(d.call_id, f"decisions[{i}].call_id")
        if kinds.get(d.call_id, (0,))[0] != pb.PENDING_CALL_KIND_APPROVAL:
            raise invalid(Reason.INVALID_VALUE, f"call {d.call_id!r} is not waiting for an approval",
                          field=f"decisions[{i}].call_id")  # fmt: skip
        seen.add(d.call_id)
        merged.decisions[d.call_id] = d
        if d.approved and d.always:
            always.add(kinds[d.call_id][1])
    for i, r in enumerate(req.results):
        twice(r.call_id, f"results[{i}].call_id")
        if kinds.get(r.call_id, (0,))[0] != pb.PENDING_CALL_KIND_EXTERNAL_RESULT:
            raise invalid(Reason.INVALID_VALUE, f"call {r.call_id!r} is not waiting for an external result",
                          field=f"results[{i}].call_id")  # fmt: skip
        seen.add(r.call_id)
        merged.results[r.call_id] = r
    for i, rec in enumerate(req.reconciliations):
        twice(rec.call_id, f"reconciliations[{i}].call_id")
        if kinds.get(rec.call_id, (0,))[0] != pb.PENDING_CALL_KIND_RECONCILIATION:
            raise invalid(Reason.INVALID_VALUE, f"call {rec.call_id!r} is not waiting for a reconciliation",
                          field=f"reconciliations[{i}].call_id")  # fmt: skip
        reconcile.validate(rec, i)
        seen.add(rec.call_id)
        merged.reconciliations[rec.call_id] = rec
    return merged, always
