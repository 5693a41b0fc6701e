"""Build and serve the RunService process.

The ready hook opens the database and creates the tables, opens one long-lived channel
per peer, then takes over runs whose lease expired (a previous life of this replica, or
a dead one) before the service reports SERVING. On PostgreSQL it also opens the event
LISTEN connection first (runs/events/notify.py), and event streams then wait for its wake-ups
instead of polling the database. On SIGTERM the draining hook asks local runs to stop at their
next wait (the drain's grace counts from then) and the close hook waits for them and
releases their leases, so a restart or another replica continues them.
"""

from __future__ import annotations

from agentrt.client.channels import MeshClient
from agentrt.core.ids import new_id
from agentrt.mesh.local_calls import LocalCalls
from agentrt.mesh.server import MeshServer, ServiceBinding
from agentrt.mesh.storage.db import Database
from agentrt.mesh.telemetry.metrics import RunMetrics
from agentrt.runs.config import RunsConfig
from agentrt.runs.events.hub import EventHub
from agentrt.runs.events.notify import EventListener
from agentrt.runs.loop.deps import Deps, crash_at
from agentrt.runs.manager import RunManager
from agentrt.runs.peers.client import Peers
from agentrt.runs.servicer import RunServicer
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import run_service_pb2_grpc as pb_grpc

SERVICE_NAME = "agentrt.v1.RunService"


def build_server(config: RunsConfig, local: LocalCalls | None = None) -> MeshServer:
    """Return the RunService server (not started); `server.manager` is its RunManager.

    `local` names the peers served by this same process (`agentrt serve all`): a run's
    turn calls to them cross no wire (mesh/local_calls.py).
    """
    db = Database(
        config.server.db_url, pool_size=config.server.db_pool_size, max_overflow=config.server.db_max_overflow
    )
    owner = config.replica_id or new_id("replica")
    store = RunStore(db, replica=owner)
    if not db.is_sqlite:
        # Renewals get a connection of their own: behind a busy replica's run writes (a pool
        # of a few connections, dozens of runs) a renewal waited past the lease (issue 13).
        store.lease_db = Database(config.server.db_url, pool_size=1, max_overflow=1)
    client = MeshClient(
        gateway=config.gateway_address,
        tools=config.tools_address,
        sessions=config.sessions_address,
        tasks=config.tasks_address,
        token=config.server.auth_token,
        # gRPC reaches the peers (runs/peers/): calls wait for a READY replica, and the
        # retry policy re-sends the loop's fenced writes too.
        wait_for_ready=True,
        fenced=True,
    )
    peers = Peers(
        client,
        tool_grace_s=config.tool_call_grace_seconds,
        unavailable_s=config.peer_unavailable_seconds,
        local=local,
    )
    hub = EventHub(config.subscriber_buffer)
    listener = None if db.is_sqlite else EventListener(config.server.db_url, hub, owner, store.input_watch)
    metrics = RunMetrics()  # the server's registry: one /metrics with the RPC series
    deps = Deps(
        store=store,
        peers=peers,
        hub=hub,
        owner=owner,
        lease_seconds=config.lease_seconds,
        crash=crash_at(config.crash_points),
        metrics=metrics,
        peer_streams=config.peer_streams,
    )
    # With a listener, a stream waits for a wake-up, never for a poll interval.
    poll = config.poll_seconds if listener is None else None
    manager = RunManager(deps, config.default_model, poll_seconds=poll)
    servicer = RunServicer(manager)

    async def ready() -> None:
        await store.create_tables()
        if listener is not None:
            await listener.start()
        # Open the channels once, here, so the first turn pays no connection setup.
        for stub in ("gateway_service", "tool_service", "session_service"):
            getattr(client, stub)
        await manager.start()
        await manager.observe_store()

    async def close() -> None:
        await manager.stop(config.server.grace_seconds)
        await peers.close()
        if listener is not None:
            await listener.close()
        await db.close()
        if store.lease_db is not None:
            await store.lease_db.close()

    binding = ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_RunServiceServicer_to_server(servicer, s))

    async def draining() -> None:
        await manager.begin_drain(config.server.grace_seconds)

    server = MeshServer(
        config.server, [binding], ready=ready, close=close, draining=draining, registry=metrics.registry
    )
    server.manager = manager  # type: ignore[attr-defined]
    server.listener = listener  # type: ignore[attr-defined]
    return server


async def serve(config: RunsConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    await build_server(config).serve_forever()
