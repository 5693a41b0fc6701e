"""The task tools: spawn_task, task_status, task_retry, task_stop, as clients of TaskService (004 §2.13).

The tool service runs them like any tool call, through its journal (a repeat of a call
answers from its record; spawn_task also passes `<run_id>/<call_id>` as SpawnTask's
idempotency key, so even a second execution attempt gets the same task back). They know
the run they serve and nothing else: TaskService resolves the run's session and agent
(SpawnTask's `parent_run_id`) and scopes every other call to that session
(`caller_run_id`: a task of another session answers as unknown).

Delivery: every call asks TaskService to hold a terminal result it answers with
(`hold_delivery`); the held delivery id rides in the outcome's host-only details, and the
executor acknowledges it (AckTaskResult) once the outcome is journaled, the record the
run loop reads the call's output from (a run that takes over answers from it). A result
the model was never handed is not acknowledged: its hold expires into a notification. A
task still WORKING in the answer holds nothing (004 §2.13 "a task still reported as
running is NOT delivered").

Refusals TaskService answers (an unknown task, the live-task cap, the depth limit, a task
that is not retryable or out of attempts, the service unreachable) are results with
`is_error` and the reason in the details: the model reads why and may do something else.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError
from agentrt.core.tasknote import escape
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import from_rpc_error
from agentrt.tools.calls import args as A
from agentrt.tools.calls.args import ArgError
from agentrt.tools.calls.results import Outcome, refused
from agentrt.v1 import task_service_pb2 as pb

log = logging.getLogger("agentrt.tools")

#: task_status's longest wait, seconds (004 §2.13 default).
MAX_WAIT_S = 120
#: Bound of one TaskService call beyond a wait it asks for, seconds.
CALL_TIMEOUT_S = 60.0
#: Bound of the acknowledgement, seconds: the call's result waits for it, so it is short
#: (an ack that fails leaves the hold to expire into a notification).
ACK_TIMEOUT_S = 5.0
#: The key of the held delivery in an outcome's details.
HELD_KEY = "held_delivery"
_STATUS = {
    pb.TASK_STATUS_WORKING: "working",
    pb.TASK_STATUS_INPUT_REQUIRED: "input_required",
    pb.TASK_STATUS_COMPLETED: "completed",
    pb.TASK_STATUS_FAILED: "failed",
    pb.TASK_STATUS_CANCELED: "canceled",
}
_STOP = {
    pb.STOP_OUTCOME_CANCELED: "stopped: the task is canceled",
    pb.STOP_OUTCOME_AFTER_TURN: "stopping: its run ends after its current step and records its own ending",
    pb.STOP_OUTCOME_ALREADY_FINISHED: "nothing to stop: the task had already ended",
    pb.STOP_OUTCOME_FINISHED_FIRST: "too late: the task ended on its own before the stop took effect",
}


def status_name(status: int) -> str:
    """The lowercase name of a TaskStatus ("unknown" for a value this build does not know)."""
    return _STATUS.get(status, "unknown")  # type: ignore[call-overload]


def render(task: pb.Task, *, with_result: bool) -> str:
    """The model's view of a task: one record line, then its result when it ended.

    The line is `task <id> <status> attempt=<n>/<max> label="…" summary="…"` with the
    label and summary escaped as in a notification (core.tasknote); the full result (or
    failure) follows on its own lines after `result:`.
    """
    status = status_name(task.status)
    line = (
        f"task {task.task_id} {status} attempt={max(task.attempt, 1)}/{max(task.max_attempts, 1)} "
        f'label="{escape(task.label)}" summary="{escape(task.summary)}"'
    )
    out = [line]
    if status == "failed" and task.attempt < task.max_attempts:
        left = task.max_attempts - task.attempt
        out.append(
            f"retry: it may be retried with task_retry ({left} attempt{'s' if left != 1 else ''} left)"
        )
    if status == "input_required":
        out.append("waiting: its run needs a person's approval before it can go on")
    if with_result and status in ("completed", "failed", "canceled"):
        body = task.result or (task.failure.message if task.HasField("failure") else "")
        out.append("result:")
        out.append(body or "(empty)")
    elif status == "working":
        out.append("It is still working; its result arrives as a [task notification] message.")
    return "\n".join(out)


def _ok(text: str, task: pb.Task, held: str, **details: Any) -> Outcome:
    facts: dict[str, Any] = {"task_id": task.task_id, "status": status_name(task.status), **details}
    if held:
        facts[HELD_KEY] = {"task_id": task.task_id, "delivery_id": held}
    return Outcome(content=text, summary=text.split("\n", 1)[0][:200], details=facts)


def _refusal(tool: str, err: MeshError) -> Outcome:
    return refused(f"{tool}: {err.message}", str(err.reason), status_code=str(err.status))


class TaskTools:
    """Runs the four task tools against TaskService (see the module docstring)."""

    def __init__(self, client: MeshClient) -> None:
        """Call TaskService through client (its `tasks` address set)."""
        self.client = client

    async def close(self) -> None:
        """Close the channel."""
        await self.client.close()

    async def _call(self, method: str, request: Any, tenant: str, timeout: float) -> Any:
        stub = self.client.task_service
        try:
            return await getattr(stub, method)(request, metadata=[(TENANT_HEADER, tenant)], timeout=timeout)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err

    async def run(self, tenant: str, run_id: str, call_id: str, name: str, args: dict[str, Any]) -> Outcome:
        """Run one task tool call; refusals and failures are results (is_error), never raised.

        Args:
            tenant: the caller's tenant.
            run_id: the run the call belongs to (the parent run of a spawn, the scope of the rest).
            call_id: the call (with run_id, a spawn's idempotency key).
            name: one of catalog.TASK_TOOL_NAMES.
            args: the decoded arguments object.

        Raises:
            ArgError: arguments the tool cannot use (the executor turns it into a result).
        """
        try:
            if name == "spawn_task":
                return await self._spawn(tenant, run_id, call_id, args)
            if name == "task_status":
                return await self._status(tenant, run_id, args)
            if name == "task_retry":
                return await self._retry(tenant, run_id, args)
            return await self._stop(tenant, run_id, args)
        except MeshError as err:
            return _refusal(name, err)

    async def _spawn(self, tenant: str, run_id: str, call_id: str, args: dict[str, Any]) -> Outcome:
        text = A.required_str(args, "input")
        label = A.optional_str(args, "label")
        agent = A.optional_str(args, "agent")
        if len(label) > 200:
            raise ArgError("spawn_task: label must be at most 200 characters")
        req = pb.SpawnTaskRequest(
            parent_run_id=run_id, input=text, label=label, agent_name=agent,
            idempotency_key=f"{run_id}/{call_id}", hold_delivery=True,
        )  # fmt: skip
        resp = await self._call("SpawnTask", req, tenant, CALL_TIMEOUT_S)
        task = resp.task
        head = f"spawned task {task.task_id}"
        return _ok(
            f"{head}\n{render(task, with_result=bool(resp.held_delivery_id))}", task, resp.held_delivery_id
        )

    async def _status(self, tenant: str, run_id: str, args: dict[str, Any]) -> Outcome:
        task_id = A.required_str(args, "task_id")
        wait = A.optional_int(args, "wait_seconds", 0) or 0
        if wait > MAX_WAIT_S:
            raise ArgError(f"task_status: wait_seconds must be at most {MAX_WAIT_S}")
        req = pb.GetTaskRequest(task_id=task_id, hold_delivery=True, caller_run_id=run_id)
        req.wait.seconds = wait
        resp = await self._call("GetTask", req, tenant, wait + CALL_TIMEOUT_S)
        return _ok(render(resp.task, with_result=True), resp.task, resp.held_delivery_id)

    async def _retry(self, tenant: str, run_id: str, args: dict[str, Any]) -> Outcome:
        req = pb.RetryTaskRequest(
            task_id=A.required_str(args, "task_id"), hold_delivery=True, caller_run_id=run_id
        )
        resp = await self._call("RetryTask", req, tenant, CALL_TIMEOUT_S)
        task = resp.task
        if resp.launched:
            head = f"retrying: attempt {task.attempt} of {task.max_attempts} started"
        else:
            head = "the retry could not start its run; the task is failed again (the attempt was not counted)"
        text = f"{head}\n{render(task, with_result=not resp.launched)}"
        return _ok(text, task, resp.held_delivery_id, launched=resp.launched)

    async def _stop(self, tenant: str, run_id: str, args: dict[str, Any]) -> Outcome:
        reason = A.optional_str(args, "reason")
        if len(reason) > 500:
            raise ArgError("task_stop: reason must be at most 500 characters")
        req = pb.StopTaskRequest(
            task_id=A.required_str(args, "task_id"), reason=reason, hold_delivery=True, caller_run_id=run_id
        )
        resp = await self._call("StopTask", req, tenant, CALL_TIMEOUT_S + 30.0)
        head = _STOP.get(resp.outcome, "stop answered")  # type: ignore[call-overload]
        text = f"{head}\n{render(resp.task, with_result=True)}"
        return _ok(text, resp.task, resp.held_delivery_id)

    async def acknowledge(self, tenant: str, outcome: Outcome) -> None:
        """Tell TaskService the model has the result an outcome carries (it is journaled).

        Best effort: a failure leaves the hold to expire into a notification.
        """
        held = outcome.details.get(HELD_KEY)
        if not isinstance(held, dict):
            return
        req = pb.AckTaskResultRequest(
            task_id=str(held.get("task_id", "")), delivery_id=str(held.get("delivery_id", ""))
        )
        try:
            await self._call("AckTaskResult", req, tenant, ACK_TIMEOUT_S)
        except MeshError as err:
            log.warning("task %s: acknowledging its result failed: %s", req.task_id, err)
