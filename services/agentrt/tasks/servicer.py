"""TaskService servicer: proto <-> domain and nothing else (validation lives in manager.py).

Until the restart sweep has run (the server's ready hook), every RPC answers
UNAVAILABLE/SERVICE_STARTING: the sweep must come before any request (004 §2.13), and a
retry claimed ahead of it would have its fresh run declared dead.

Metrics (`TaskMetrics`, mesh/telemetry/metrics.py): spawns by outcome, retries, stops by
outcome, WatchTasks streams open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import current_tenant
from agentrt.mesh.durations import seconds_of
from agentrt.mesh.telemetry.metrics import TaskMetrics
from agentrt.tasks.domain import Task, TaskStatus
from agentrt.tasks.manager import TaskManager
from agentrt.tasks.stop import StopResult
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc

_STATUS = {
    TaskStatus.WORKING: pb.TASK_STATUS_WORKING,
    TaskStatus.INPUT_REQUIRED: pb.TASK_STATUS_INPUT_REQUIRED,
    TaskStatus.COMPLETED: pb.TASK_STATUS_COMPLETED,
    TaskStatus.FAILED: pb.TASK_STATUS_FAILED,
    TaskStatus.CANCELED: pb.TASK_STATUS_CANCELED,
}
_OUTCOME = {
    StopResult.CANCELED: pb.STOP_OUTCOME_CANCELED,
    StopResult.AFTER_TURN: pb.STOP_OUTCOME_AFTER_TURN,
    StopResult.ALREADY_FINISHED: pb.STOP_OUTCOME_ALREADY_FINISHED,
    StopResult.FINISHED_FIRST: pb.STOP_OUTCOME_FINISHED_FIRST,
}


def task_message(task: Task, with_result: bool = True) -> pb.Task:
    """The proto of a task; without its result for listings and change streams."""
    msg = pb.Task(
        task_id=task.task_id, run_id=task.run_id, attempt=task.attempt, status=_STATUS[task.status],
        kind=task.kind, label=task.label, summary=task.summary,
        result=task.result if with_result else "", session_id=task.session_id,
        parent_session_id=task.parent_session_id, parent_run_id=task.parent_run_id,
        max_attempts=task.max_attempts, state=task.state, session_generation=task.session_generation,
        parent_generation=task.parent_generation, depth=task.depth, continuations=task.continuations,
        agent_name=task.agent_name, agent_version=task.agent_version, workspace=task.workspace,
        step=task.step, steps=len(task.steps), pending_delivery_id=task.delivery_id,
        notified_seq=task.notified_seq, change_seq=task.change_seq,
    )  # fmt: skip
    msg.create_time.FromMicroseconds(int(task.create_time * 1_000_000))
    msg.update_time.FromMicroseconds(int(task.update_time * 1_000_000))
    if task.failure is not None and task.status == TaskStatus.FAILED:
        f = task.failure
        msg.failure.CopyFrom(
            cpb.FailureInfo(kind=f.kind, message=f.message, retryable=f.retryable, reason=f.reason)
        )
    return msg


class TaskServicer(pb_grpc.TaskServiceServicer):
    """TaskService over a TaskManager (see the module docstring)."""

    def __init__(self, manager: TaskManager, metrics: TaskMetrics | None = None) -> None:
        """Serve manager's requests, counting into metrics (a private TaskMetrics when None)."""
        self.manager = manager
        self.metrics = metrics if metrics is not None else TaskMetrics()
        #: Set by the server once the restart sweep has run.
        self.ready = False

    def _gate(self) -> str:
        if not self.ready:
            raise MeshError(
                Status.UNAVAILABLE, Reason.SERVICE_STARTING, "the task service is starting; try again"
            )
        return current_tenant()

    async def SpawnTask(
        self, request: pb.SpawnTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.SpawnTaskResponse:
        """Create a task and start its first run (see TaskManager.spawn for every error)."""
        tenant = self._gate()
        try:
            task, held = await self.manager.spawn(tenant, request)
        except MeshError as err:
            self.metrics.spawns.labels(str(err.reason).lower()).inc()
            raise
        self.metrics.spawns.labels("ok").inc()
        return pb.SpawnTaskResponse(task=task_message(task), held_delivery_id=held)

    async def GetTask(
        self, request: pb.GetTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTaskResponse:
        """Return a task, waiting up to `wait` (at most 120 s) for it to leave WORKING.

        Errors: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_VALUE for the wait),
        NOT_FOUND/TASK_NOT_FOUND.
        """
        tenant = self._gate()
        wait = seconds_of(request.wait, "wait")  # malformed (mixed signs, nanos range) refused
        task, held = await self.manager.get(tenant, request.task_id, wait, request.hold_delivery)
        return pb.GetTaskResponse(task=task_message(task), held_delivery_id=held)

    async def ListTasks(
        self, request: pb.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTasksResponse:
        """List tasks newest first (INVALID_ARGUMENT for bad paging; NOT_FOUND for the session)."""
        tasks, token = await self.manager.list(
            self._gate(), request.parent_session_id, request.page_size, request.page_token
        )
        return pb.ListTasksResponse(
            tasks=[task_message(t, with_result=False) for t in tasks], next_page_token=token
        )

    async def RetryTask(
        self, request: pb.RetryTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryTaskResponse:
        """Reopen a failed task (see TaskManager.retry for every error)."""
        task, launched, held = await self.manager.retry(self._gate(), request.task_id, request.hold_delivery)
        self.metrics.retries.labels("true" if launched else "false").inc()
        return pb.RetryTaskResponse(task=task_message(task), launched=launched, held_delivery_id=held)

    async def StopTask(
        self, request: pb.StopTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopTaskResponse:
        """Stop a task and say what the stop did (see TaskManager.stop for every error)."""
        outcome, task, held = await self.manager.stop(
            self._gate(), request.task_id, request.reason, request.hold_delivery
        )
        self.metrics.stops.labels(outcome.value).inc()
        return pb.StopTaskResponse(outcome=_OUTCOME[outcome], task=task_message(task), held_delivery_id=held)

    async def WatchTasks(
        self, request: pb.WatchTasksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchTasksResponse]:
        """Stream a parent session's task changes (see TaskManager.watch for every error)."""
        changes = await self.manager.watch(self._gate(), request.parent_session_id, request.after_change_seq)
        with self.metrics.watchers.track_inprogress():
            async for task in changes:
                yield pb.WatchTasksResponse(task=task_message(task, with_result=False))

    async def AckTaskResult(
        self, request: pb.AckTaskResultRequest, context: grpc.aio.ServicerContext
    ) -> pb.AckTaskResultResponse:
        """Acknowledge a held result (INVALID_ARGUMENT, NOT_FOUND/TASK_NOT_FOUND)."""
        acked = await self.manager.ack(self._gate(), request.task_id, request.delivery_id)
        return pb.AckTaskResultResponse(acknowledged=acked)
