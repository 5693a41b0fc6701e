"""Build and serve the ToolService process.

The `ready` hook migrates the tables (Alembic), reaps the sandboxes a dead owner of the
same state directory left running (`sandbox/guard.py`, decision 0031), and probes the
sandbox: a scratch command checks from both sides that isolation holds (no root, no
/etc/shadow, read-only system, no network, writable workspace). When it does not, the
service still serves (file tools need no sandbox) but exec_command answers
FAILED_PRECONDITION/SANDBOX_UNAVAILABLE with the finding. Unconfined mode is announced
loudly on stderr. The `close` hook lets running commands end within what is left of the drain
(AGENTRT_DRAIN_SECONDS from the moment the stop began: a command whose caller went away gets
the drain, as one whose caller still waits does), then kills them (journaled INTERRUPTED,
SERVICE_STOPPED) and disposes of the database.
Spans and metrics: execution/observe.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys

from agentrt.client.channels import MeshClient
from agentrt.mesh.server import MeshServer, ServiceBinding
from agentrt.mesh.storage.db import Database
from agentrt.mesh.telemetry.metrics import ToolMetrics
from agentrt.tools.config import SANDBOX_UNCONFINED, ToolsConfig
from agentrt.tools.execution.executor import ToolExecutor
from agentrt.tools.execution.observe import ToolObserver
from agentrt.tools.execution.tasks import TaskTools
from agentrt.tools.files.paths import open_workspace
from agentrt.tools.sandbox.guard import SandboxOwner, reap_orphans
from agentrt.tools.sandbox.local import LocalSandbox
from agentrt.tools.sandbox.manager import SandboxManager
from agentrt.tools.servicer import ToolServicer
from agentrt.tools.storage.migrate import upgrade
from agentrt.tools.storage.store import ToolStore
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

SERVICE_NAME = "agentrt.v1.ToolService"

log = logging.getLogger("agentrt.tools")

_UNCONFINED_BANNER = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! agentrt tools: SANDBOX=unconfined. Commands run WITHOUT isolation: they can reach  !!
!! the network and write anywhere this service's user (or the workspace owner) can.   !!
!! Use only for trusted agents on a machine you can afford to lose.                     !!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


def build_server(config: ToolsConfig) -> MeshServer:
    """Return the ToolService server (not started).

    Raises:
        ValueError: the database URL is neither sqlite+aiosqlite nor postgresql+asyncpg.
    """
    db = Database(
        config.db_url, pool_size=config.server.db_pool_size, max_overflow=config.server.db_max_overflow
    )
    store = ToolStore(db)
    owner = SandboxOwner.of(config.server.state_dir)
    runner = LocalSandbox(config.sandbox, config.max_progress_bytes, config.bwrap_path, owner)
    sandboxes = SandboxManager(config, store, runner)
    task_tools = None
    if config.tasks_address:
        task_tools = TaskTools(MeshClient(tasks=config.tasks_address, token=config.server.auth_token))
    metrics = ToolMetrics()  # its registry is the server's: one /metrics with the RPC series
    executor = ToolExecutor(config, store, runner, sandboxes, ToolObserver(metrics), task_tools)
    servicer = ToolServicer(executor, sandboxes)
    binding = ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_ToolServiceServicer_to_server(servicer, s))

    async def ready() -> None:
        await upgrade(db)
        reaped = await reap_orphans(owner)
        if reaped:
            log.warning("reaped %d sandbox(es) a dead process of %s left running", reaped, owner.state_dir)
        root = sandboxes.root
        os.makedirs(root, exist_ok=True)
        scratch_path = os.path.join(root, f".probe-{os.getpid()}")
        shutil.rmtree(scratch_path, ignore_errors=True)
        scratch = open_workspace(
            scratch_path, make_parents=True, sandbox_uid=config.sandbox_uid, sandbox_gid=config.sandbox_gid
        )
        try:
            await runner.probe(scratch)
        finally:
            shutil.rmtree(scratch_path, ignore_errors=True)
        if config.sandbox == SANDBOX_UNCONFINED:
            print(_UNCONFINED_BANNER, file=sys.stderr, flush=True)
            log.warning("sandbox mode is UNCONFINED: commands run without isolation")
        elif runner.available:
            log.info("sandbox: bubblewrap isolation verified (workspaces under %s)", root)
        else:
            log.error("sandbox unavailable, exec_command will be refused: %s", runner.problem)

    async def close() -> None:
        # Commands in flight get what is left of the operator's drain (AGENTRT_DRAIN_SECONDS,
        # counted from SIGTERM), then are killed and journaled; named shells first: their
        # in-flight commands end in an error.
        await executor.close(server.drain_left_seconds())
        await runner.close()
        await sandboxes.docker.close()  # kills in-flight docker commands; containers stay
        if task_tools is not None:
            await task_tools.close()
        await db.close()

    server = MeshServer(
        config.server,
        [binding],
        ready=ready,
        close=close,
        registry=metrics.registry,
        calls=servicer.execute_calls,
    )
    return server


async def serve(config: ToolsConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    await build_server(config).serve_forever()
