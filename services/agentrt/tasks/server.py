"""Build and serve the TaskService process.

The `ready` hook, before health turns SERVING and before any request is answered:
migrate the schema (Alembic), run the restart sweep (FailOrphans: tasks a previous life
left mid-launch are failed and returned; their parents are told through the deliveries
the sweep owes), then start the background loops: leases and adoption, deliveries,
parent checks. None of them needs RunService or SessionService to be up yet (`agentrt up`
starts RunService after this service); they wait for their peers. The `close` hook stops
the loops, releases the leases of the runs this replica followed (another replica adopts
them at once), and disposes of the channels and the database.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from agentrt.client.channels import MeshClient
from agentrt.mesh.server import MeshServer, ServiceBinding
from agentrt.mesh.storage.db import Database
from agentrt.mesh.telemetry.metrics import TaskMetrics
from agentrt.tasks.config import TasksConfig
from agentrt.tasks.delivery.notify import Deliverer
from agentrt.tasks.delivery.wake import Waker
from agentrt.tasks.lifecycle.attempts import Attempts
from agentrt.tasks.lifecycle.hub import Hub
from agentrt.tasks.lifecycle.launch import Deps
from agentrt.tasks.lifecycle.tree import Trees
from agentrt.tasks.manager import TaskManager
from agentrt.tasks.peers import Peers
from agentrt.tasks.servicer import TaskServicer
from agentrt.tasks.storage.migrate import upgrade
from agentrt.tasks.storage.store import TaskStore
from agentrt.tasks.storage.upkeep import UpkeepStore
from agentrt.tasks.storage.wakes import WakeStore
from agentrt.v1 import task_service_pb2_grpc as pb_grpc

SERVICE_NAME = "agentrt.v1.TaskService"
log = logging.getLogger("agentrt.tasks")


@dataclass
class TaskServer(MeshServer):
    """The TaskService MeshServer, with its parts reachable (operators' hooks and tests)."""

    deps: Deps | None = None
    manager: TaskManager | None = None
    attempts: Attempts | None = None
    deliverer: Deliverer | None = None
    waker: Waker | None = None


def build_server(config: TasksConfig) -> TaskServer:
    """Return the TaskService server (not started).

    Raises:
        ValueError: `config.server.db_url` is neither sqlite+aiosqlite nor postgresql+asyncpg.
    """
    db = Database(
        config.server.db_url, pool_size=config.server.db_pool_size, max_overflow=config.server.db_max_overflow
    )
    client = MeshClient(
        runs=config.runs_address, sessions=config.sessions_address, token=config.server.auth_token
    )
    deps = Deps(
        store=TaskStore(db, config.notify_grace_seconds),
        upkeep=UpkeepStore(db),
        peers=Peers(client, config.peer_unavailable_seconds),
        hub=Hub(),
        config=config,
        owner=config.replica_id or f"tasks-{uuid.uuid4().hex[:12]}",
    )
    attempts = Attempts(deps)
    manager = TaskManager(deps, attempts, Trees(deps, attempts))
    deliverer = Deliverer(deps, manager.trees)
    waker = Waker(deps, WakeStore(db), manager.callers, manager.trees)
    metrics = TaskMetrics()  # the server's registry: one /metrics with the RPC series
    servicer = TaskServicer(manager, metrics)
    binding = ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_TaskServiceServicer_to_server(servicer, s))

    async def ready() -> None:
        await upgrade(db)
        orphans = await attempts.sweep_at_start()
        if orphans:
            log.warning("restart sweep failed %d task(s) left mid-launch", len(orphans))
        servicer.ready = True
        await attempts.start()
        deliverer.start()
        waker.start()
        manager.trees.start()

    async def close() -> None:
        servicer.ready = False
        await deliverer.stop()
        await waker.stop()
        await manager.trees.stop()
        await attempts.stop()
        await deps.peers.close()
        await db.close()

    return TaskServer(
        config.server, [binding], ready=ready, close=close, registry=metrics.registry,
        deps=deps, manager=manager, attempts=attempts, deliverer=deliverer, waker=waker,
    )  # fmt: skip


async def serve(config: TasksConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    await build_server(config).serve_forever()
