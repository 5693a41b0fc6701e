"""TaskService servicer: validates every request and answers from the (empty) task table.

Spawning is not built yet: SpawnTask and RetryTask answer UNIMPLEMENTED with reason
NOT_IMPLEMENTED_YET after validating their input, so a client learns both that its
request was well-formed and that the feature is not there. Lookups of any task id
answer NOT_FOUND/TASK_NOT_FOUND, which is true: no task exists.
"""

from __future__ import annotations

import grpc

from agentrt.core.errors import MeshError, Reason, Status, missing, not_found
from agentrt.v1 import task_service_pb2 as pb
from agentrt.v1 import task_service_pb2_grpc as pb_grpc


def _not_yet(what: str) -> MeshError:
    return MeshError(
        Status.UNIMPLEMENTED, Reason.NOT_IMPLEMENTED_YET, f"{what} is not available in this release"
    )


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
        """INVALID_ARGUMENT/MISSING_FIELD without task_id; NOT_FOUND/TASK_NOT_FOUND otherwise."""
        if not request.task_id:
            raise missing("task_id")
        raise not_found(Reason.TASK_NOT_FOUND, f"task {request.task_id!r} not found")

    async def ListTasks(
        self, request: pb.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTasksResponse:
        """Return no tasks. INVALID_ARGUMENT/MISSING_FIELD without parent_session_id."""
        if not request.parent_session_id:
            raise missing("parent_session_id")
        return pb.ListTasksResponse()

    async def RetryTask(
        self, request: pb.RetryTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryTaskResponse:
        """INVALID_ARGUMENT/MISSING_FIELD without task_id; NOT_FOUND/TASK_NOT_FOUND otherwise."""
        if not request.task_id:
            raise missing("task_id")
        raise not_found(Reason.TASK_NOT_FOUND, f"task {request.task_id!r} not found")

    async def StopTask(
        self, request: pb.StopTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopTaskResponse:
        """INVALID_ARGUMENT/MISSING_FIELD without task_id; NOT_FOUND/TASK_NOT_FOUND otherwise."""
        if not request.task_id:
            raise missing("task_id")
        raise not_found(Reason.TASK_NOT_FOUND, f"task {request.task_id!r} not found")
