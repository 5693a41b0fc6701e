"""Build and serve the SessionService process.

The `ready` hook opens the database and migrates it to the newest schema (Alembic) before
health turns SERVING; the `close` hook disposes of the engines. The servicer's series
(SessionMetrics) share the server's registry: one /metrics with the RPC series.
"""

from __future__ import annotations

from agentrt.mesh.server import MeshServer, ServiceBinding
from agentrt.mesh.storage.db import Database
from agentrt.mesh.telemetry.metrics import SessionMetrics
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.servicer import SessionServicer
from agentrt.sessions.storage.migrate import upgrade
from agentrt.sessions.storage.store import SessionStore
from agentrt.v1 import session_service_pb2_grpc as pb_grpc

SERVICE_NAME = "agentrt.v1.SessionService"


def build_server(config: SessionsConfig) -> MeshServer:
    """Return the SessionService server (not started).

    Raises:
        ValueError: `config.server.db_url` is neither sqlite+aiosqlite nor postgresql+asyncpg.
    """
    db = Database(
        config.server.db_url, pool_size=config.server.db_pool_size, max_overflow=config.server.db_max_overflow
    )
    store = SessionStore(db, watch_poll_seconds=config.watch_poll_seconds)
    metrics = SessionMetrics()
    servicer = SessionServicer(store, metrics)
    binding = ServiceBinding(
        SERVICE_NAME, lambda s: pb_grpc.add_SessionServiceServicer_to_server(servicer, s)
    )

    async def ready() -> None:
        await upgrade(db)

    return MeshServer(
        config.server,
        [binding],
        ready=ready,
        close=db.close,
        registry=metrics.registry,
        calls=servicer.append_calls,
    )


async def serve(config: SessionsConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    await build_server(config).serve_forever()
