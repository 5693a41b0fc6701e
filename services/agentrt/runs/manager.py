"""Run lifecycle across requests and replicas: start, resume, cancel, inject, leases, takeover.

The manager owns the executors running in this process (one asyncio task per run), the
lease renewal (runs/lifecycle/lease_keeper.py, a task of its own: every third of the lease it renews
the leases it holds; a lost lease stops the executor silently; a cancellation requested on
another replica is honoured here), the start (the runs held in this replica's own name by an
earlier process are taken back at once, decision 0045) and the housekeeping loop, which at the same period
fails suspended runs whose time budget ran out (004 §2.9: the budget holds while a
run waits, too), then takes over RUNNING runs whose lease expired (a dead replica's, or
one resumed elsewhere and not claimed) and continues them from their log.

The drain (SIGTERM) is in runs/lifecycle/drain.py (RunDrain, mixed in): it stops the
takeovers, stops the local runs at their next wait and hands them over; the housekeeping
loop skips its passes while draining and the renewals go on until `stop` ends the loop.

Resume, cancel, inject and stop-after-turn are in runs/lifecycle/control.py (RunControl, mixed in).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from agentrt.core.errors import MeshError, Reason, invalid, missing, not_found, precondition
from agentrt.core.ids import new_id, valid_id
from agentrt.runs.domain import RunRecord, StoredEvent
from agentrt.runs.events.build import run_started_events
from agentrt.runs.events.hub import run_topic, session_topic
from agentrt.runs.events.stream import follow_batches
from agentrt.runs.lifecycle import sandboxes
from agentrt.runs.lifecycle.child_runs import ChildRuns
from agentrt.runs.lifecycle.control import RunControl
from agentrt.runs.lifecycle.drain import RunDrain
from agentrt.runs.lifecycle.lease_keeper import LeaseKeeper
from agentrt.runs.loop import failures
from agentrt.runs.loop.deps import Deps
from agentrt.runs.loop.executor import RunExecutor
from agentrt.runs.observe import store_gauges
from agentrt.runs.peers.sessions import SESSION_GENERATION
from agentrt.runs.spec.agents import limits_of, snapshot, validate_agent
from agentrt.runs.spec.requests import check_text_bytes
from agentrt.runs.spec.start import (
    DIGEST_STATE,
    check_idempotency_key,
    check_labels,
    check_replay,
    request_digest,
)
from agentrt.runs.spec.validation import validate_sandbox
from agentrt.runs.storage.store import SessionBusy
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

log = logging.getLogger("agentrt.runs")
T = TypeVar("T")


class RunManager(RunControl, RunDrain):
    """Starts and steers runs; see the module docstring."""

    def __init__(self, deps: Deps, default_model: str, poll_seconds: float | None = 1.0) -> None:
        """Create a manager; nothing runs until `start()`."""
        self.deps = deps
        self.default_model = default_model
        self.poll_seconds = poll_seconds
        self._executors: dict[str, tuple[RunExecutor, asyncio.Task[None]]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        #: Monotonic deadline of the drain once `begin_drain` ran (None: not draining).
        self._drain_deadline: float | None = None
        #: Lease-taking writes and their spawn, outliving their request (`unabandoned`).
        self._pending_spawns: set[asyncio.Future[Any]] = set()
        #: Runs this process is resuming: the takeover scan leaves them to the resume.
        self._claiming: set[str] = set()
        self._resuming: dict[str, tuple[asyncio.Lock, int]] = {}
        #: Background cancels of an ended run's unfinished children (kept referenced).
        self._tails: set[asyncio.Task[None]] = set()
        #: Agents as tools: the executors' ChildHost, answers routed to children
        #: (runs/lifecycle/child_runs.py).
        self.children = ChildRuns(self)
        deps.children = self.children

    # -- process lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Take back this replica id's runs and take over expired ones; then keep leases alive.

        A replica id names one live process at a time (docs/operations.md): a lease held in
        this id's name when this process starts is an earlier process's (killed, or restarted
        in place), so it is taken at once rather than after it expires. The takeover bumps
        the fencing token, as every takeover does, so a zombie of that process could write
        nothing more (decision 0045).
        """
        await self.takeover(own=True)
        self._loop_task = asyncio.create_task(self._lease_loop(), name="agentrt-runs-leases")

    async def _lease_loop(self) -> None:
        """The leases' own task (runs/lifecycle/lease_keeper.py), then the housekeeping every period."""
        keeper = LeaseKeeper(
            self.store,
            self.deps.owner,
            self.deps.lease_seconds,
            lambda: {run_id: ex.token for run_id, (ex, _) in self._executors.items()},
            self._stop_local,
            self._honour_cancels,
        )
        renewals = asyncio.create_task(keeper.run(), name="agentrt-runs-lease-renewal")
        next_sweep = 0.0  # the first pass sweeps: a replica that died may have left sandboxes
        try:
            while True:
                await asyncio.sleep(keeper.period_s)
                if self.draining:
                    continue  # draining: the renewals go on, no run is taken over
                try:
                    await self.expire_suspended()
                    await self.children.sync_all()
                    await self.takeover()
                    await self.observe_store()
                    sandboxes.retry_releases(self.deps.peers, self.deps.releases)
                    if time.monotonic() >= next_sweep:
                        next_sweep = time.monotonic() + sandboxes.SWEEP_PERIOD_S
                        sandboxes.start_sweep(self.store, self.deps.peers, self.deps.releases)
                except Exception:  # noqa: BLE001 - the loop outlives a database hiccup
                    log.exception("runs housekeeping failed")
        finally:
            renewals.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewals

    async def _honour_cancels(self, run_ids: set[str]) -> None:
        """Stop the local runs whose cancellation was requested on another replica."""
        for run_id in run_ids:
            record = await self.store.get_run(run_id)
            self._stop_local(run_id, "cancel", record.cancel_reason if record else "")

    async def observe_store(self) -> None:
        """Set the store-wide gauges (runs/observe.py) from one read of the runs store."""
        suspended, approvals, waiting = await store_gauges(self.store)
        self.deps.metrics.observe_store(
            suspended=suspended, pending_approvals=approvals, waiting_for_replica=waiting
        )

    def _stop_local(self, run_id: str, reason: str, message: str = "") -> None:
        entry = self._executors.get(run_id)
        if entry is not None:
            entry[0].stop(reason, message)

    async def expire_suspended(self) -> list[str]:
        """Fail the suspended runs whose time budget has ended; return their ids."""
        ended = []
        for run_id in await self.store.overdue_suspended():
            record = await self.store.get_run(run_id)
            if record is None or record.status != cpb.RUN_STATUS_SUSPENDED:
                continue
            timeout = failures.failure(
                "timeout", "The run used its time budget while it was suspended.", retryable=True
            )
            try:
                await self._end_here(record, "", None, status=cpb.RUN_STATUS_FAILED, failure=timeout)
            except MeshError:
                continue  # resumed or ended meanwhile
            await self.children.cancel_children(record, "the parent run used its time budget")
            ended.append(run_id)
        return ended

    async def takeover(self, own: bool = False) -> list[str]:
        """Continue RUNNING runs whose lease expired; return the ids taken over.

        With `own` (at start only: nothing of this process holds a lease yet), also the runs
        whose lease is held in this replica's name, live or not (see `start`).
        """
        taken = []
        for run_id in await self.store.expired_runs(self.deps.owner if own else ""):
            if run_id in self._executors or run_id in self._claiming:
                continue
            before = await self.store.get_run(run_id)
            token = await self.store.acquire_lease(run_id, self.deps.owner, self.deps.lease_seconds)
            record = await self.store.get_run(run_id) if token is not None else None
            if record is None or token is None:
                continue
            if before is not None:  # since the lease expired, or since the resume left it unheld
                since = before.lease_expires_s or before.update_time_s
                self.deps.metrics.replica_wait.observe(max(0.0, time.time() - since))
            seq, session_seq = await self.store.event_heads(run_id, record.tenant, record.session_id)
            log.info("run %s: taken over by %s", run_id, self.deps.owner)
            self.spawn(record, token, seq, session_seq)
            taken.append(run_id)
        return taken

    def spawn(self, record: RunRecord, token: int, seq: int, session_seq: int) -> None:
        """Execute a run whose lease this replica holds (token); events are numbered after seq."""
        executor = RunExecutor(self.deps, record, token, seq, session_seq)
        if self.draining:
            executor.stop("shutdown")  # started during the drain: handed over at its first wait
        task = asyncio.create_task(executor.run(), name=f"run-{record.run_id}")
        self._executors[record.run_id] = (executor, task)
        run_id = record.run_id

        def forget(done: asyncio.Task[None]) -> None:
            # A resumed run may already have a new executor under the same id.
            entry = self._executors.get(run_id)
            if entry is not None and entry[1] is done:
                del self._executors[run_id]
            if executor.ended and executor.r.state.get("child_run_ids"):
                # A run that ended leaves no child running (one its batch never reached).
                tail = asyncio.create_task(self.children.cancel_children(executor.r, "the parent run ended"))
                self._tails.add(tail)
                tail.add_done_callback(self._tails.discard)

        task.add_done_callback(forget)

    async def wait_idle(self, run_id: str) -> None:
        """Return once no local executor drives run_id (tests and CancelRun use it)."""
        entry = self._executors.get(run_id)
        if entry is not None:
            await asyncio.shield(entry[1])

    # -- agents ----------------------------------------------------------------------------

    async def register_agent(self, tenant: str, spec: pb.AgentSpec) -> pb.AgentSpec:
        """Validate and store a new version of spec.

        Raises:
            MeshError: INVALID_ARGUMENT (see agents.validate_agent).
        """
        validate_agent(spec, require_name=True)
        return await self.store.register_agent(tenant, spec)

    async def get_agent(self, tenant: str, name: str, version: int) -> pb.AgentSpec:
        """Return a registered spec. Raises NOT_FOUND/AGENT_NOT_FOUND, INVALID_ARGUMENT."""
        if not name:
            raise missing("name")
        if version < 0:
            raise invalid(Reason.INVALID_VALUE, "version must be >= 0", field="version")
        spec = await self.store.get_agent(tenant, name, version)
        if spec is None:
            raise not_found(
                Reason.AGENT_NOT_FOUND, f"agent {name!r} (version {version or 'latest'}) not found"
            )
        return spec

    # -- runs ------------------------------------------------------------------------------

    async def start_run(self, tenant: str, req: pb.StartRunRequest) -> RunRecord:
        """Record a run and start executing it; return its record (004 §2.1; 002 RunStarted).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_AGENT, INVALID_JSON,
                INVALID_VALUE, INVALID_ID, UNKNOWN_TOOL); NOT_FOUND (AGENT_NOT_FOUND, or the
                session service's SESSION_NOT_FOUND); FAILED_PRECONDITION/SESSION_BUSY; a
                peer's UNAVAILABLE.
        """
        spec = await self._resolve_agent(tenant, req)
        if not req.input.strip():
            raise missing("input")
        check_text_bytes(req.input, "input")
        if req.workspace and not req.workspace.startswith("/"):
            raise invalid(Reason.INVALID_VALUE, "workspace must be an absolute path", field="workspace")
        if req.HasField("sandbox"):
            validate_sandbox(req.sandbox, "sandbox")
        check_idempotency_key(req.idempotency_key)
        check_labels(dict(req.labels))
        digest = request_digest(req) if req.idempotency_key else ""
        if req.idempotency_key:
            existing = await self.store.find_idempotent(tenant, req.idempotency_key)
            if existing is not None:
                check_replay(req, str(existing.state.get(DIGEST_STATE, "")))
                return existing
        snap = snapshot(spec, self.default_model, await self.deps.peers.catalog(tenant))
        session_id, last_seq, generation = await self._session_for(tenant, req.session_id)
        now = time.time()
        budget = limits_of(snap).time_budget_s
        record = RunRecord(
            run_id=new_id("run"), tenant=tenant, session_id=session_id, agent_name=snap.name,
            agent_version=snap.version, agent=snap, input=req.input, workspace=req.workspace,
            labels=dict(req.labels), idempotency_key=req.idempotency_key or None, session_last_seq=last_seq,
            lease_owner=self.deps.owner, lease_expires_s=now + self.deps.lease_seconds, fencing_token=1,
            create_time_s=now, update_time_s=now, deadline_s=now + budget if budget else 0.0,
            state={DIGEST_STATE: digest} if digest else {},
        )  # fmt: skip
        record.state.update(sandboxes.initial_state(record.run_id, sandboxes.effective(spec, req)))
        if generation:
            record.state[SESSION_GENERATION] = generation  # the run holds its session by generation
        try:
            stored_record, stored = await self.unabandoned(self._record_and_spawn(record))
        except SessionBusy as busy:
            raise precondition(
                Reason.SESSION_BUSY, f"session {session_id!r} already has an unfinished run {busy}"
            ) from None
        if not stored:  # the idempotency key was taken meanwhile
            check_replay(req, str(stored_record.state.get(DIGEST_STATE, "")))
            return stored_record
        return record

    async def _record_and_spawn(self, record: RunRecord) -> tuple[RunRecord, list[StoredEvent]]:
        """Insert the new run (RUNNING, this replica's lease) and spawn its executor; see `insert_run`."""
        stored_record, stored = await self.store.insert_run(record, run_started_events(record))
        if stored:
            self.deps.hub.deliver(stored)
            self.deps.metrics.runs_started.inc()
            self.spawn(record, 1, stored[-1].seq, stored[-1].session_seq)
        return stored_record, stored

    async def unabandoned(self, work: Coroutine[Any, Any, T]) -> T:
        """Await work, which runs to its end even when the request awaiting it is cancelled.

        For the writes that give this replica a run's lease and the spawn that follows them
        (StartRun's insert, ResumeRun's claim): a request cancelled between the two (its
        caller gone, the drain's RPC grace over) would leave a run leased here that no
        executor drives, until the lease expires. `stop` waits for such work before it
        collects the executors (runs/lifecycle/drain.py).
        """
        task = asyncio.ensure_future(work)
        self._pending_spawns.add(task)
        task.add_done_callback(self._pending_spawns.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # the request may be gone
        return await asyncio.shield(task)

    async def _resolve_agent(self, tenant: str, req: pb.StartRunRequest) -> pb.AgentSpec:
        if req.agent_version < 0:
            raise invalid(Reason.INVALID_VALUE, "agent_version must be >= 0", field="agent_version")
        if req.agent_name:
            probe = pb.AgentSpec(name=req.agent_name)
            validate_agent(probe, require_name=True, field="agent_name")
            registered = await self.get_agent(tenant, req.agent_name, req.agent_version)
            # Registered before today's checks existed, a spec is checked again, not run.
            validate_agent(registered, require_name=True, field="agent_name")
            return registered
        if not req.HasField("agent"):
            raise invalid(Reason.MISSING_FIELD, "agent_name or agent is required", field="agent")
        validate_agent(req.agent, require_name=False)
        return req.agent

    async def _session_for(self, tenant: str, session_id: str) -> tuple[str, int, int]:
        """(session id, its last seq, its generation) of the run's session, created when not named."""
        if not session_id:
            created = await self.deps.peers.create_session(tenant)
            return created.session_id, 0, created.generation
        if not valid_id(session_id):
            raise invalid(Reason.INVALID_ID, "session_id is malformed", field="session_id")
        session = await self.deps.peers.get_session(tenant, session_id)
        busy = await self.store.busy_run(tenant, session_id)
        if busy is not None:
            raise precondition(
                Reason.SESSION_BUSY, f"session {session_id!r} already has an unfinished run {busy}"
            )
        return session.session_id, session.last_seq, session.generation

    async def events(self, tenant: str, req: pb.StreamRunEventsRequest) -> AsyncIterator[list[pb.RunEvent]]:
        """Follow a run's or a session's events after req.after_seq, in batches (stream.follow_batches).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_VALUE when both ids are set
                or after_seq < 0); NOT_FOUND (RUN_NOT_FOUND, SESSION_NOT_FOUND).
        """
        if req.run_id and req.session_id:
            raise invalid(Reason.INVALID_VALUE, "set exactly one of run_id and session_id")
        if req.after_seq < 0:
            raise invalid(Reason.INVALID_VALUE, "after_seq must be >= 0", field="after_seq")
        if req.run_id:
            record = await self.get_run(tenant, req.run_id)

            async def read_run(after: int, upto: int | None) -> list[StoredEvent]:
                return await self.store.read_events(record.run_id, after, upto)

            async def run_head() -> int:
                return await self.store.run_head(record.run_id)

            async def run_ended() -> bool:
                again = await self.store.get_run(record.run_id)
                return again is None or again.finished

            return follow_batches(self.deps.hub, run_topic(record.run_id), read_run, req.after_seq,
                                  poll_seconds=self.poll_seconds, head=run_head, ended=run_ended)  # fmt: skip
        if not req.session_id:
            raise invalid(Reason.MISSING_FIELD, "run_id or session_id is required", field="run_id")
        if not valid_id(req.session_id):
            raise invalid(Reason.INVALID_ID, "session_id is malformed", field="session_id")
        session = await self.deps.peers.get_session(tenant, req.session_id)

        async def read_session(after: int, upto: int | None) -> list[StoredEvent]:
            return await self.store.read_session_events(tenant, session.session_id, after, upto)

        async def session_head() -> int:
            return await self.store.session_head(tenant, session.session_id)

        topic = session_topic(tenant, session.session_id)
        return follow_batches(self.deps.hub, topic, read_session, req.after_seq,
                              poll_seconds=self.poll_seconds, head=session_head)  # fmt: skip
