"""The task manager's requests: spawn, get (with its wait), list, retry, watch, acknowledge.

Every request is validated before anything is touched, so bad input changes nothing.
Spawn and retry claim the row first and launch second (launch.py); a spawn whose first
run cannot be started is rolled back whole (row and hidden session, in a detached task,
so a caller that gives up cannot cut the rollback short), while a retry whose run cannot
be started is released: back to failed, the attempt not counted, the launch failure as
its result, owed to the parent like any ending (004 §2.13).

A result handed to a model (`hold_delivery`) is held from notification for the caller,
who acknowledges it once the model has it; it is held only when the answer itself is
terminal, so a task still reported as working is never counted as delivered.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

from sqlalchemy.exc import SQLAlchemyError

from agentrt.core.errors import MeshError, Reason, Status, invalid, missing, not_found, precondition
from agentrt.core.ids import new_id, valid_id
from agentrt.tasks.callers import Callers
from agentrt.tasks.domain import (
    Task,
    TaskStatus,
    attempts_exhausted,
    new_launch_id,
    not_retryable,
    retry_input,
)
from agentrt.tasks.lifecycle.attempts import Attempts
from agentrt.tasks.lifecycle.launch import Deps, Launcher, detached, launch_failure
from agentrt.tasks.lifecycle.stop import Stopper, StopResult
from agentrt.tasks.lifecycle.tree import Trees
from agentrt.tasks.storage.store import Replay
from agentrt.v1 import task_service_pb2 as pb

_KIND_RE = re.compile(r"^[A-Za-z0-9_.:-]{0,64}\Z")
_AGENT_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
_TOKEN_RE = re.compile(r"^(\d{1,20})\.([A-Za-z0-9][A-Za-z0-9_.:-]{0,127})\Z")
MAX_LABEL = 200
MAX_STATE_BYTES = 64 * 1024
MAX_KEY = 256
MAX_REASON = 500


def _id(value: str, name: str, required: bool = True) -> str:
    if not value:
        if required:
            raise missing(name)
        return value
    if not valid_id(value):
        raise invalid(Reason.INVALID_ID, f"{name} is malformed", field=name)
    return value


def _bad(name: str, message: str) -> MeshError:
    return invalid(Reason.INVALID_VALUE, message, field=name)


class TaskManager:
    """Serves the task requests (see the module docstring)."""

    def __init__(self, deps: Deps, attempts: Attempts, trees: Trees) -> None:
        """Serve through deps, attempts (launching, following) and trees (stale parents)."""
        self.deps = deps
        self.attempts = attempts
        self.trees = trees
        self.stopper = Stopper(deps, attempts)
        self.callers = Callers(deps.peers)

    @property
    def launcher(self) -> Launcher:
        """The launcher of task runs."""
        return self.attempts.launcher

    async def task(self, tenant: str, task_id: str) -> Task:
        """Return the tenant's task. Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID), NOT_FOUND."""
        task = await self.deps.store.get(tenant, _id(task_id, "task_id"))
        if task is None:
            raise not_found(Reason.TASK_NOT_FOUND, f"task {task_id!r} not found")
        return task

    async def held(self, task: Task, hold: bool) -> str:
        """Hold task's owed ending for a caller handing it to a model; return its delivery id (or "")."""
        if not (hold and task.terminal and task.delivery_id):
            return ""
        until = time.time() + self.deps.config.hold_seconds
        return task.delivery_id if await self.deps.upkeep.hold(task, task.delivery_id, until) else ""

    # -- spawn ---------------------------------------------------------------------------------

    def _validate_spawn(self, req: pb.SpawnTaskRequest) -> None:
        _id(req.parent_session_id, "parent_session_id")  # filled from parent_run_id by Callers
        _id(req.parent_run_id, "parent_run_id", required=False)
        if not req.input.strip():
            raise missing("input")
        if req.agent_name and req.HasField("agent"):
            raise _bad("agent", "set agent_name or agent, not both")
        if not req.agent_name and not req.HasField("agent"):
            raise invalid(Reason.MISSING_FIELD, "agent_name or agent is required", field="agent_name")
        if req.agent_name and not _AGENT_RE.match(req.agent_name):
            raise invalid(
                Reason.INVALID_AGENT, "agent_name must be 1..64 of [A-Za-z0-9_.-]", field="agent_name"
            )
        if req.agent_version < 0:
            raise _bad("agent_version", "agent_version must be >= 0")
        if len(req.label) > MAX_LABEL:
            raise _bad("label", f"label is longer than {MAX_LABEL} characters")
        if not _KIND_RE.match(req.kind):
            raise _bad("kind", "kind must be at most 64 of [A-Za-z0-9_.:-]")
        if len(req.state.encode()) > MAX_STATE_BYTES:
            raise _bad("state", f"state is larger than {MAX_STATE_BYTES} bytes")
        bound = self.deps.config.limits.max_continuations
        if len(req.steps) > bound:
            raise _bad("steps", f"at most {bound} steps may be chained")
        for i, step in enumerate(req.steps):
            if not step.strip():
                raise invalid(Reason.MISSING_FIELD, f"steps[{i}] is blank", field=f"steps[{i}]")
        if req.workspace and not req.workspace.startswith("/"):
            raise _bad("workspace", "workspace must be an absolute path")
        if len(req.idempotency_key) > MAX_KEY:
            raise _bad("idempotency_key", f"idempotency_key is longer than {MAX_KEY} characters")

    @staticmethod
    def _replayed(existing: Task, req: pb.SpawnTaskRequest) -> Task:
        if existing.parent_session_id != req.parent_session_id or existing.input != req.input:
            raise invalid(
                Reason.IDEMPOTENCY_KEY_REUSED,
                "idempotency_key was used by another spawn",
                field="idempotency_key",
                task_id=existing.task_id,
            )
        return existing

    async def _depth(self, tenant: str, parent_id: str, hidden: bool) -> int:
        """The new task's depth; a check that cannot be made refuses (004 §2.13)."""
        if not hidden:
            return 1
        try:
            owner = await self.deps.store.of_session(tenant, parent_id)
        except (SQLAlchemyError, OSError) as exc:
            raise MeshError(
                Status.UNAVAILABLE,
                Reason.DEPENDENCY_UNAVAILABLE,
                "the task store could not tell the parent's depth",
            ) from exc
        if owner is None:
            raise precondition(
                Reason.TASK_DEPTH_UNKNOWN,
                f"session {parent_id!r} is hidden and serves no known task: its depth cannot be told",
            )
        return owner.depth + 1

    async def spawn(self, tenant: str, req: pb.SpawnTaskRequest) -> tuple[Task, str]:
        """Create a task and start its first run; return it and the id of a held result.

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_AGENT,
                INVALID_VALUE, IDEMPOTENCY_KEY_REUSED); NOT_FOUND (SESSION_NOT_FOUND,
                AGENT_NOT_FOUND); FAILED_PRECONDITION (TASK_DEPTH_LIMIT, TASK_DEPTH_UNKNOWN,
                TASK_LIMIT); RunService's own refusal of the first run (the spawn is rolled
                back); UNAVAILABLE when a peer or the store cannot be reached.
        """
        self._validate_spawn(req)
        store, peers, limits = self.deps.store, self.deps.peers, self.deps.config.limits
        if req.idempotency_key:
            existing = await store.by_key(tenant, req.idempotency_key)
            if existing is not None:
                task = self._replayed(existing, req)
                return task, await self.held(task, req.hold_delivery)
        parent = await peers.get_session(tenant, req.parent_session_id)
        depth = await self._depth(tenant, parent.session_id, parent.hidden)
        if depth > limits.max_depth:
            raise precondition(
                Reason.TASK_DEPTH_LIMIT,
                f"tasks nest at most {limits.max_depth} deep; this one would be {depth}",
                max_depth=str(limits.max_depth),
            )  # fmt: skip
        agent_version, spec = req.agent_version, None
        if req.agent_name:
            agent_version = (await peers.get_agent(tenant, req.agent_name, req.agent_version)).version
        else:
            spec = req.agent.SerializeToString()
        launch = new_launch_id()
        task = Task(
            tenant=tenant, task_id=new_id("tsk"), parent_session_id=parent.session_id,
            parent_generation=parent.generation, parent_run_id=req.parent_run_id, status=TaskStatus.WORKING,
            launch_id=launch, input=req.input, depth=depth, kind=req.kind, label=req.label, state=req.state,
            agent_name=req.agent_name, agent_version=agent_version, agent_spec=spec, steps=tuple(req.steps),
            workspace=req.workspace, max_attempts=limits.max_attempts, owner=self.deps.owner,
            lease_until=self.deps.lease_until(), idempotency_key=req.idempotency_key or None,
        )  # fmt: skip
        try:
            claimed = await store.claim_spawn(task, limits.max_live_per_parent)
        except Replay as replay:
            task = self._replayed(replay.task, req)
            return task, await self.held(task, req.hold_delivery)
        self.deps.hub.changed()
        # Detached: a caller that hangs up does not cut the launch (or its rollback) in half;
        # the task it asked for exists, and a replay with its idempotency key finds it.
        after = await detached(self._launch_spawn(claimed))
        return after, await self.held(after, req.hold_delivery)

    async def _launch_spawn(self, claimed: Task) -> Task:
        with self.attempts.launching(claimed, claimed.launch_id):
            return await self._launch_spawn_held(claimed)

    async def _launch_spawn_held(self, claimed: Task) -> Task:
        peers, store, launch = self.deps.peers, self.deps.store, claimed.launch_id
        session = None
        try:
            session = await peers.create_hidden(
                claimed.tenant, claimed.parent_session_id, claimed.label or claimed.task_id,
                {"agentrt.task_id": claimed.task_id, "agentrt.parent_run_id": claimed.parent_run_id},
            )  # fmt: skip
            placed = await store.set_session(claimed, launch, session.session_id, session.generation)
            if placed is None:  # stopped (or swept) before it had a session
                await detached(peers.delete_session(claimed.tenant, session.session_id, session.generation))
                return await store.get(claimed.tenant, claimed.task_id) or claimed
            return await self.launcher.start(placed, launch, claimed.input)
        except Exception:
            await self._rollback(claimed, session)
            raise

    async def _rollback(self, claimed: Task, session: object) -> None:
        """Undo a spawn whose first run never started: the row, then its hidden session."""
        await self.deps.store.delete_spawn(claimed, claimed.launch_id)
        self.deps.hub.changed()
        sid, gen = getattr(session, "session_id", ""), getattr(session, "generation", 0)
        if sid:
            try:
                await self.deps.peers.delete_session(claimed.tenant, sid, gen)
            except MeshError:
                pass

    # -- get, list, ack ------------------------------------------------------------------------

    async def get(self, tenant: str, task_id: str, wait_s: float, hold: bool) -> tuple[Task, str]:
        """Return the task, waiting up to wait_s seconds for it to leave WORKING.

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID; INVALID_VALUE for a wait
                below 0 or above the bound); NOT_FOUND/TASK_NOT_FOUND.
        """
        bound = self.deps.config.limits.max_wait_seconds
        if wait_s < 0 or wait_s > bound:
            raise _bad("wait", f"wait must be between 0 and {bound:g} seconds")
        task = await self.task(tenant, task_id)
        deadline = time.monotonic() + wait_s
        while task.status == TaskStatus.WORKING and time.monotonic() < deadline:
            await self.deps.hub.wait(min(self.deps.config.poll_seconds, deadline - time.monotonic()))
            task = await self.task(tenant, task_id)
        return task, await self.held(task, hold)

    async def list(self, tenant: str, parent_id: str, page_size: int, token: str) -> tuple[list[Task], str]:
        """Return a page of tasks, newest first, and the next page's token ("" at the end).

        Raises:
            MeshError: INVALID_ARGUMENT (INVALID_ID, INVALID_VALUE for page_size or the
                token); NOT_FOUND/SESSION_NOT_FOUND for an unknown parent session.
        """
        _id(parent_id, "parent_session_id", required=False)
        if page_size < 0 or page_size > 1000:
            raise _bad("page_size", "page_size must be 0..1000")
        before = None
        if token:
            m = _TOKEN_RE.match(token)
            if m is None:
                raise _bad("page_token", "page_token is malformed")
            before = (int(m.group(1)), m.group(2))
        parent = None
        if parent_id:
            session = await self.deps.peers.get_session(tenant, parent_id)
            parent = (session.session_id, session.generation)
            self.trees.stale(tenant, session.session_id, session.generation)
        size = page_size or 100
        tasks = await self.deps.store.page(tenant, parent, size + 1, before)
        more = len(tasks) > size
        tasks = tasks[:size]
        last = tasks[-1] if tasks else None
        return tasks, (f"{int(last.create_time * 1_000_000)}.{last.task_id}" if more and last else "")

    async def ack(self, tenant: str, task_id: str, delivery_id: str) -> bool:
        """Acknowledge that the model has the ending of delivery_id (OnResultDelivered).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID); NOT_FOUND/TASK_NOT_FOUND.
        """
        _id(delivery_id, "delivery_id")
        task = await self.task(tenant, task_id)
        done = await self.deps.upkeep.ack(task, delivery_id)
        if done is not None:
            self.deps.hub.changed()
        return done is not None

    async def stop(self, tenant: str, task_id: str, reason: str, hold: bool) -> tuple[StopResult, Task, str]:
        """Stop a task; return what the stop did, the task afterwards and a held result's id.

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_VALUE for a
                reason over 500 characters); NOT_FOUND/TASK_NOT_FOUND; and see Stopper.stop.
        """
        _id(task_id, "task_id")
        if len(reason) > MAX_REASON:
            raise _bad("reason", f"reason is longer than {MAX_REASON} characters")
        outcome, task = await self.stopper.stop(tenant, task_id, reason)
        return outcome, task, await self.held(task, hold)

    # -- retry ---------------------------------------------------------------------------------

    async def retry(self, tenant: str, task_id: str, hold: bool) -> tuple[Task, bool, str]:
        """Reopen a failed task on a new run; return (the task, whether its run started, held id).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID); NOT_FOUND/TASK_NOT_FOUND;
                FAILED_PRECONDITION (TASK_NOT_RETRYABLE, TASK_ATTEMPTS_EXHAUSTED, TASK_LIMIT);
                ABORTED/RETRY_CONFLICT when another writer moved the task first.
        """
        task = await self.task(tenant, task_id)
        if task.status != TaskStatus.FAILED:
            raise not_retryable(task)
        if task.attempt >= task.max_attempts:
            raise attempts_exhausted(task)
        launch = new_launch_id()
        claimed = await self.deps.store.retry_claim(
            task,
            launch,
            self.deps.owner,
            self.deps.lease_until(),
            self.deps.config.limits.max_live_per_parent,
        )
        self.deps.hub.changed()
        # Detached, as a spawn's launch: the claim is bound or released whatever the caller does.
        return await detached(self._launch_retry(task, claimed, hold))

    async def _launch_retry(self, task: Task, claimed: Task, hold: bool) -> tuple[Task, bool, str]:
        launch = claimed.launch_id
        with self.attempts.launching(claimed, launch):
            try:
                if not await self.launcher.end_session_runs(claimed, "its task was retried"):
                    raise precondition(
                        Reason.SESSION_BUSY, "the previous attempt's run is still ending; retry again"
                    )
                text = retry_input(task.failure, claimed.step_input)
                after = await self.launcher.start(claimed, launch, text)
            except MeshError as err:
                hold_s = self.deps.config.hold_seconds if hold else 0.0
                released = await self.deps.store.release_retry_claim(
                    claimed, launch, launch_failure(err), hold_s
                )
                self.deps.hub.changed()
                if released is None:
                    return await self.task(task.tenant, task.task_id), False, ""
                return released, False, released.delivery_id if hold else ""
        launched = after.launch_id == launch and bool(after.run_id)
        return after, launched, await self.held(after, hold)

    # -- watch ---------------------------------------------------------------------------------

    async def watch(self, tenant: str, parent_id: str, after: int) -> AsyncIterator[Task]:
        """Follow the parent's task changes after a change seq (see TaskService.WatchTasks).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_VALUE for a
                negative cursor); NOT_FOUND/SESSION_NOT_FOUND.
        """
        _id(parent_id, "parent_session_id")
        if after < 0:
            raise _bad("after_change_seq", "after_change_seq must be >= 0")
        session = await self.deps.peers.get_session(tenant, parent_id)
        self.trees.stale(tenant, session.session_id, session.generation)
        return self._follow(tenant, session.session_id, session.generation, after)

    async def _follow(self, tenant: str, parent: str, generation: int, after: int) -> AsyncIterator[Task]:
        cfg, store, upkeep = self.deps.config, self.deps.store, self.deps.upkeep
        existed = await upkeep.parent_exists(tenant, parent, generation)
        next_check = time.monotonic() + cfg.parent_check_seconds
        while True:
            batch = await store.changes(tenant, parent, generation, after, 100)
            for task in batch:
                after = task.change_seq
                yield task
            if batch:
                continue
            exists = await upkeep.parent_exists(tenant, parent, generation)
            if existed and not exists:
                return  # the tree was removed: the session is gone
            existed = existed or exists
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + cfg.parent_check_seconds
                if await self.trees.check(tenant, parent, generation):
                    return
            await self.deps.hub.wait(cfg.poll_seconds)
