"""TaskService servicer: validates every request and answers from the (empty) task table.

Spawning is not built yet: SpawnTask and RetryTask answer UNIMPLEMENTED with reason
NOT_IMPLEMENTED_YET after validating their input, so a client learns both that its
request was well-formed and that the feature is not there. Lookups of any task id
answer NOT_FOUND/TASK_NOT_FOUND, which is true: no task exists.
"""

from __future__ import annotations

import grpc

from agentrt.core.errors import MeshError, Reason, Status, invalid, missing, not_found
from agentrt.core.ids import valid_id
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc


def _not_yet(what: str) -> MeshError:
    return MeshError(
        Status.UNIMPLEMENTED, Reason.NOT_IMPLEMENTED_YET, f"{what} is not available in this release"
    )


def _task_id(value: str) -> str:
    """Return a well-formed task id.

    Raises:
        MeshError: INVALID_ARGUMENT/MISSING_FIELD when empty, INVALID_ARGUMENT/INVALID_ID when malformed.
    """
    if not value:
        raise missing("task_id")
    if not valid_id(value):
        raise invalid(Reason.INVALID_ID, "task_id is malformed", field="task_id")
    return value


class TaskServicer(pb_grpc.TaskServiceServicer):
    """TaskService over no tasks (see the module docstring)."""

    async def SpawnTask(
        self, request: pb.SpawnTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.SpawnTaskResponse:
        """Validate, then UNIMPLEMENTED/NOT_IMPLEMENTED_YET.

        Raises INVALID_ARGUMENT/MISSING_FIELD without parent_session_id, agent_name or input.
        """
        for name in ("parent_session_id", "agent_name", "input"):
            if not getattr(request, name):
                raise missing(name)
        raise _not_yet("spawning tasks")

    async def GetTask(
        self, request: pb.GetTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTaskResponse:
        """INVALID_ARGUMENT/MISSING_FIELD without task_id; NOT_FOUND/TASK_NOT_FOUND otherwise.

        Also INVALID_ARGUMENT/INVALID_ID for a malformed id and INVALID_ARGUMENT/INVALID_VALUE
        for a negative `wait` or one above 120 s.
        """
        _task_id(request.task_id)
        wait = request.wait.seconds + request.wait.nanos / 1e9
        if wait < 0 or wait > 120:
            raise invalid(Reason.INVALID_VALUE, "wait must be between 0 and 120 seconds", field="wait")
        raise not_found(Reason.TASK_NOT_FOUND, f"task {request.task_id!r} not found")

    async def ListTasks(
        self, request: pb.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTasksResponse:
        """Return no tasks. INVALID_ARGUMENT/MISSING_FIELD without parent_session_id."""
        if not request.parent_session_id:
            raise missing("parent_session_id")
        if not valid_id(request.parent_session_id):
            raise invalid(Reason.INVALID_ID, "parent_session_id is malformed", field="parent_session_id")
        if request.page_size < 0:
            raise invalid(Reason.INVALID_VALUE, "page_size must not be negative", field="page_size")
        return pb.ListTasksResponse()

    async def RetryTask(
        self, request: pb.RetryTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryTaskResponse:
        """INVALID_ARGUMENT/MISSING_FIELD without task_id; NOT_FOUND/TASK_NOT_FOUND otherwise."""
        _task_id(request.task_id)
        raise not_found(Reason.TASK_NOT_FOUND, f"task {request.task_id!r} not found")

    async def StopTask(
        self, request: pb.StopTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopTaskResponse:
        """INVALID_ARGUMENT/MISSING_FIELD without task_id; NOT_FOUND/TASK_NOT_FOUND otherwise."""
        _task_id(request.task_id)
        raise not_found(Reason.TASK_NOT_FOUND, f"task {request.task_id!r} not found")
