"""A run's sandbox: which one, its creation through ToolService, and its release (issue 11).

A run names a sandbox in `StartRunRequest.sandbox` or its agent's `AgentSpec.sandbox` (the
request wins; 004 §2.7n–§2.7q). StartRun keeps the effective `RunSandbox` and the sandbox's
id in the run's state (`state["sandbox"]`, base64 of the proto; `state["sandbox_id"]`), so
every replica, resume and takeover uses the same sandbox; a handoff does not change it (the
sandbox is the run's, not the agent's).

Invariants:
- The id is derived from the run id (`sandbox_id_for`): a crash between CreateSandbox and
  any write of ours cannot leak a second sandbox, since the next executor asks for the same
  id, and CreateSandbox adopts a sandbox whose id and settings match (004 §2.7n).
- `ensure` is called before a tool batch runs; each executor asks once (the first batch of a
  segment), which also resumes a stopped sandbox and recreates one removed behind our back.
  Within one executor, a call refused because someone stopped or destroyed the sandbox
  (SANDBOX_STOPPED, SANDBOX_NOT_FOUND) has it asked for again (runs/loop/phases/sandbox.py).
- Every tool call of the run carries the sandbox id and no workspace (ExecuteTool takes one
  or the other); the run's `workspace`, when given, becomes the sandbox's workspace.
- `release` destroys the sandbox once the run's end is stored (completed, failed, canceled),
  whoever ends it (the executor, or the manager for a suspended run), in the background
  (`Releases.start`), so no RPC (CancelRun) waits on the tool service. A release that fails
  (the tool service is down) is remembered in `Releases` and retried by the manager in the
  background (`retry_releases`, from its lease loop) until it succeeds. A process that dies
  first forgets it, so the run row is the durable record: every replica sweeps, at its
  first housekeeping pass and every SWEEP_PERIOD_S after (`sweep`, in the background), the
  ended runs whose state names a sandbox without the `sandbox_released` mark, destroys each
  (a sandbox already gone counts) and marks it. DestroySandbox is idempotent, so a sweep
  racing a release, or two replicas sweeping, destroys nothing twice that matters.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.domain import RunRecord
from agentrt.runs.peers.client import Peers
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb

log = logging.getLogger("agentrt.runs")

#: Run-state keys (runs/storage/records.py RunRecord.state).
SANDBOX_STATE = "sandbox"
SANDBOX_ID_STATE = "sandbox_id"

#: Run-state key: the ended run's sandbox is known to be gone (set by `sweep`).
RELEASED_STATE = "sandbox_released"
#: Seconds between two sweeps of one replica for sandboxes ended runs left behind.
SWEEP_PERIOD_S = 60.0
#: Most ended runs one sweep looks at.
SWEEP_BATCH = 50

#: Errors of CreateSandbox that are the run's configuration, not a passing outage: the run
#: fails with kind `sandbox_unavailable` instead of `unavailable` (retryable).
_CONFIG_STATUSES = (Status.INVALID_ARGUMENT, Status.FAILED_PRECONDITION, Status.NOT_FOUND)


def effective(spec: pb.AgentSpec, req: pb.StartRunRequest) -> pb.RunSandbox | None:
    """Return the sandbox a run uses: the request's, else the agent's, else None."""
    if req.HasField("sandbox"):
        return req.sandbox
    if spec.HasField("sandbox"):
        return spec.sandbox
    return None


def sandbox_id_for(run_id: str) -> str:
    """Return the id of run_id's sandbox (`sbx_` + the run id's suffix; a valid_id)."""
    return "sbx_" + run_id.removeprefix("run_")


def initial_state(run_id: str, box: pb.RunSandbox | None) -> dict[str, Any]:
    """Return the run-state entries StartRun stores for box ({} when the run has none)."""
    if box is None:
        return {}
    return {
        SANDBOX_STATE: base64.b64encode(box.SerializeToString()).decode("ascii"),
        SANDBOX_ID_STATE: sandbox_id_for(run_id),
    }


def sandbox_of(r: RunRecord) -> tuple[str, pb.RunSandbox] | None:
    """Return (sandbox id, RunSandbox) of a run, or None when its tools run without one."""
    sid = str(r.state.get(SANDBOX_ID_STATE, ""))
    if not sid:
        return None
    box = pb.RunSandbox.FromString(base64.b64decode(str(r.state.get(SANDBOX_STATE, ""))))
    return sid, box


def create_request(r: RunRecord) -> tpb.CreateSandboxRequest | None:
    """Return the CreateSandbox request of a run's sandbox (None when it has none)."""
    found = sandbox_of(r)
    if found is None:
        return None
    sid, box = found
    return tpb.CreateSandboxRequest(
        sandbox_id=sid,
        backend=box.backend,
        workspace=r.workspace,
        image=box.image,
        env=dict(box.env),
        user=box.user,
        network=box.network,
        limits=box.limits,
    )


class SandboxRefused(Exception):
    """CreateSandbox refused the run's sandbox as configured (not a passing outage)."""

    def __init__(self, err: MeshError) -> None:
        """Keep the tool service's error."""
        super().__init__(err.message)
        self.error = err


async def ensure(peers: Peers, r: RunRecord) -> str:
    """Create or adopt the run's sandbox; return its id ("" when the run has none).

    Raises:
        SandboxRefused: the tool service refused it (INVALID_ARGUMENT, FAILED_PRECONDITION
            such as SANDBOX_UNAVAILABLE for a missing image, SANDBOX_FOREIGN).
        MeshError: the tool service is unreachable (UNAVAILABLE) or timed out.
    """
    request = create_request(r)
    if request is None:
        return ""
    try:
        await peers.create_sandbox(r.tenant, request)
    except MeshError as err:
        if err.status in _CONFIG_STATUSES:
            raise SandboxRefused(err) from err
        raise
    return request.sandbox_id


@dataclass
class Releases:
    """The replica's sandbox releases: in flight, and failed ones to retry (this process only).

    `pending` maps a sandbox id to (tenant, run id); `task` is the retry pass in flight;
    `running` the releases started by `start` and not finished.
    """

    pending: dict[str, tuple[str, str]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    running: set[asyncio.Task[bool]] = field(default_factory=set)
    sweep_task: asyncio.Task[int] | None = None

    def start(self, peers: Peers, r: RunRecord) -> None:
        """Release an ended run's sandbox in the background (nothing when it has none)."""
        if sandbox_of(r) is None:
            return
        task = asyncio.create_task(release(peers, r, self), name=f"agentrt-runs-release-{r.run_id}")
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def drain(self, timeout_s: float) -> None:
        """Shutdown: let releases in flight finish for up to timeout_s seconds; stop retrying."""
        for task in (self.task, self.sweep_task):
            if task is not None and not task.done():
                task.cancel()  # what is still pending is in the run rows: the next sweep
        if self.running:
            await asyncio.wait(set(self.running), timeout=timeout_s)


async def _destroy(peers: Peers, tenant: str, run_id: str, sid: str) -> bool:
    """DestroySandbox; True when the sandbox is gone (a sandbox already gone counts). Never raises."""
    try:
        await peers.destroy_sandbox(tenant, sid)
    except MeshError as err:
        if err.reason == Reason.SANDBOX_NOT_FOUND:
            return True
        log.warning("run %s: its sandbox %s could not be released: %s", run_id, sid, err)
        return False
    except Exception:  # noqa: BLE001 - the run has ended; a leak is logged, never raised
        log.exception("run %s: its sandbox %s could not be released", run_id, sid)
        return False
    log.info("run %s: sandbox %s released", run_id, sid)
    return True


async def release(peers: Peers, r: RunRecord, retry: Releases | None = None) -> bool:
    """Destroy an ended run's sandbox; return True when it is gone (or the run had none).

    Never raises: the run's end is stored either way. A failed release is added to `retry`
    (when given) for `retry_releases`.
    """
    found = sandbox_of(r)
    if found is None:
        return True
    sid = found[0]
    if await _destroy(peers, r.tenant, r.run_id, sid):
        return True
    if retry is not None:
        retry.pending[sid] = (r.tenant, r.run_id)
    return False


def retry_releases(peers: Peers, releases: Releases) -> None:
    """Start one background pass over the failed releases, unless one runs or none is pending.

    The pass tries each once (a peer that is down is waited for as any call waits for it),
    so it runs apart from the caller's loop; what fails again stays pending for the next.
    """
    if not releases.pending or (releases.task is not None and not releases.task.done()):
        return

    async def one_pass() -> None:
        for sid, (tenant, run_id) in list(releases.pending.items()):
            if await _destroy(peers, tenant, run_id, sid):
                releases.pending.pop(sid, None)

    releases.task = asyncio.create_task(one_pass(), name="agentrt-runs-sandbox-releases")


class SandboxRows(Protocol):
    """What `sweep` needs of the runs store (runs/storage/store.py RunStore)."""

    async def unreleased_sandboxes(self, limit: int) -> list[RunRecord]:
        """Ended runs with a sandbox not yet marked released (at most limit)."""
        ...

    async def mark_sandbox_released(self, run_id: str) -> None:
        """Mark the ended run's sandbox as gone."""
        ...


async def sweep(store: SandboxRows, peers: Peers, releases: Releases) -> int:
    """Destroy the sandboxes of ended runs not yet marked released; mark each; return how many.

    Never raises: a sandbox that cannot be destroyed now (the tool service is down) stays
    unmarked for the next sweep.
    """
    done = 0
    try:
        for r in await store.unreleased_sandboxes(SWEEP_BATCH):
            found = sandbox_of(r)
            if found is not None and not await _destroy(peers, r.tenant, r.run_id, found[0]):
                continue
            if found is not None:
                releases.pending.pop(found[0], None)
            await store.mark_sandbox_released(r.run_id)
            done += 1
    except Exception:  # noqa: BLE001 - housekeeping outlives a database hiccup
        log.exception("runs: the sweep for sandboxes of ended runs failed")
    return done


def start_sweep(store: SandboxRows, peers: Peers, releases: Releases) -> None:
    """Start one background `sweep` unless one runs (the lease loop calls this)."""
    if releases.sweep_task is not None and not releases.sweep_task.done():
        return
    releases.sweep_task = asyncio.create_task(
        sweep(store, peers, releases), name="agentrt-runs-sandbox-sweep"
    )
