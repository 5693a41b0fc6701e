"""Meshes the e2e tests share, and the reset every test starts from.

Starting a mesh is five `agentrt serve` processes (4-6 s on 2 cores, most of it imports), so
the e2e tests share three per pytest process instead of starting one per module (conftest.py):
`emulated_mesh` (SQLite, no auth), `token_mesh` (every service requires MESH_TOKEN) and
`shared_chaos` (PostgreSQL, the crash tests: chaos_helpers.ChaosMesh). Each starts on first
use and stops at the end of the session. Under pytest-xdist every e2e test is in one group
(tests/conftest.py), so one worker starts each.

A test gets its mesh after a reset, so nothing an earlier test left reaches it:

- no run is left RUNNING or SUSPENDED: each is canceled (through the runs service, with its
  tenant) and waited for until it ended, so no earlier run asks the model or runs a command
  during the test (`end_unfinished_runs`);
- the provider emulator is as new (`ProviderEmulator.reset`: no script, no requests, no
  responder, no rate-limit mode); a chaos module then sets its own responder;
- the chaos mesh's topology is its own again (`reset_chaos`): one plain process per service
  on the mesh's address of that service (runs as replica "a"), every other process a test
  started (second replicas, a gateway with other settings, a replica with crash points)
  ended; a killed service is started again.

What is not reset, by design: rows of ended runs, sessions, agents and journals (each test
uses run ids, sessions, cells and agent names of its own, and workspaces under its tmp_path).
tests/e2e/test_shared_meshes.py checks the resets.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import grpc
from chaos_helpers import ChaosMesh, stop_process
from e2e_helpers import wait_for
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.context import TENANT_HEADER
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc

T = TypeVar("T")

#: The seconds a process a reset ends gets to drain after SIGTERM (then SIGKILL).
RESET_GRACE_S = 5.0


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """Run `make()` to completion on a new event loop in a thread of its own; return its result.

    Callable from anywhere, a sync fixture of an async test included (the test's loop is
    never touched). Raises what the coroutine raised.
    """
    import asyncio

    out: list[Any] = []

    def body() -> None:
        try:
            out.append(("ok", asyncio.run(make())))  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out.append(("err", exc))

    thread = threading.Thread(target=body, name="e2e-run-async", daemon=True)
    thread.start()
    thread.join()
    kind, value = out[0]
    if kind == "err":
        raise value
    return value


async def unfinished_runs(db_url: str) -> list[tuple[str, str]]:
    """(run_id, tenant) of every run RUNNING or SUSPENDED in the runs database at `db_url`.

    Reads the runs service's table directly (SQLite or PostgreSQL URL, as the service has it).
    """
    from sqlalchemy import text

    from agentrt.mesh.storage.db import Database

    db = Database(db_url)
    try:
        async with db.read() as conn:
            rows = await conn.execute(text("SELECT run_id, tenant FROM runs WHERE status IN (1, 2)"))
            return [(str(run_id), str(tenant)) for run_id, tenant in rows.all()]
    finally:
        await db.close()


def end_unfinished_runs(runs_address: str, db_url: str, token: str = "") -> list[str]:
    """Cancel every unfinished run of the mesh and wait until each has ended.

    Args:
        runs_address: a runs replica of the mesh ("host:port").
        db_url: the runs database (what `unfinished_runs` reads).
        token: the mesh's bearer token ("" for a mesh without one).

    Returns:
        The ids of the runs that were canceled, in the order read (usually none).

    Raises:
        AssertionError: a run had not ended within e2e_helpers.STATE_TIMEOUT.
        grpc.RpcError: CancelRun failed other than FAILED_PRECONDITION (a run that ended meanwhile).
    """
    left = run_async(lambda: unfinished_runs(db_url))
    if not left:
        return []
    with grpc.insecure_channel(runs_address) as channel:
        stub = pb_grpc.RunServiceStub(channel)
        for run_id, tenant in left:
            metadata = [(TENANT_HEADER, tenant)]
            if token:
                metadata.append(("authorization", f"Bearer {token}"))
            try:
                stub.CancelRun(
                    pb.CancelRunRequest(run_id=run_id, reason="e2e reset: left by an earlier test"),
                    metadata=metadata,
                    timeout=30,
                )
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.FAILED_PRECONDITION:  # type: ignore[attr-defined]
                    raise
    wait_for(lambda: not run_async(lambda: unfinished_runs(db_url)), "the runs an earlier test left to end")
    return [run_id for run_id, _ in left]


def serving(address: str, timeout_s: float = 2.0) -> bool:
    """True when grpc.health at `address` answers SERVING within `timeout_s` seconds."""
    with grpc.insecure_channel(address) as channel:
        try:
            resp = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return resp.status == health_pb2.HealthCheckResponse.SERVING


def reset_chaos(
    chaos: ChaosMesh,
    responder: Callable[[str, Any], Any] | None,
    keep: Collection[str] = (),
) -> ChaosMesh:
    """Bring the shared chaos mesh back to its own topology and a fresh emulator (module docstring).

    Args:
        chaos: the session's chaos mesh.
        responder: the emulator's responder for the test (None: the script alone).
        keep: names of plain runs replicas that may stay up (test_chaos's second replica "b",
            which its cells share as they did on a module mesh); any other replica ends.

    Returns:
        `chaos`, with `replicas` = {"a": the runs replica on the mesh's runs address, and the
        kept ones still up} and `gateway_pid` the gateway serving on the mesh's address.

    Raises:
        AssertionError: a service could not be started again, or a run did not end.
    """
    own = chaos.mesh.addresses
    for replica in chaos.spawned:
        assert replica.proc is not None
        if replica.proc.poll() is not None:
            continue
        at_home = replica.address == own[replica.service]
        kept = replica.service == "runs" and replica.name in keep
        if not (replica.plain and (at_home or kept)):
            stop_process(replica, RESET_GRACE_S)
    chaos.spawned = [r for r in chaos.spawned if r.proc is not None and r.proc.poll() is None]
    for service, address in own.items():
        if not serving(address):  # killed by a test (or ended above): a plain one in its place
            port = int(address.rsplit(":", 1)[1])
            if service == "runs":
                chaos.spawn("runs", "a", port, {"AGENTRT_RUNS_REPLICA_ID": "a"})
            else:
                chaos.spawn(service, f"{service}-reset", port)
    a = chaos.home("runs")
    chaos.replicas = {"a": a}
    chaos.replicas.update({r.name: r for r in chaos.spawned if r.service == "runs" and r.name in keep})
    chaos.gateway_pid = chaos.home("gateway").pid
    end_unfinished_runs(a.address, chaos.env["AGENTRT_RUNS_DB"])
    chaos.emu.reset()
    chaos.emu.responder = responder
    return chaos


def runs_db_of(state_dir: Path) -> str:
    """The embedded runs database of a mesh started on `state_dir` (SQLite)."""
    from agentrt.mesh.storage.db import sqlite_url

    return sqlite_url(str(state_dir), "runs")
