"""Build and serve the TaskService process."""

from __future__ import annotations

from agentrt.mesh.server import MeshServer, ServiceBinding
from agentrt.tasks.config import TasksConfig
from agentrt.tasks.servicer import TaskServicer
from agentrt.v1 import task_service_pb2_grpc as pb_grpc

SERVICE_NAME = "agentrt.v1.TaskService"


def build_server(config: TasksConfig) -> MeshServer:
    """Return the TaskService server (not started)."""
    servicer = TaskServicer()
    binding = ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_TaskServiceServicer_to_server(servicer, s))
    return MeshServer(config.server, [binding])


async def serve(config: TasksConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    await build_server(config).serve_forever()
