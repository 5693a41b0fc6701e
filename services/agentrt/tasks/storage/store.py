"""The task store: reads, and every transition of 004 §2.13 as one compare-and-set each.

Each transition is one transaction that locks the task's parent row first (see rows.py)
and writes the task row only while its predicate holds; it returns the row as written,
or None when the row had moved on (the caller lost). The predicates:

| transition | from | predicate |
| --- | --- | --- |
| claim_spawn | (none) | fewer than `max_live` live tasks under the parent |
| set_session / bind_run | working | the launch named, nothing bound yet |
| finalize | working, input_required | the launch named |
| advance | working | the launch named, continuations below the bound (takes the lease) |
| mark_input_required | working | the launch named, its run bound |
| reclaim_working | input_required | the launch named |
| retry_claim | failed | the attempt and launch read, attempt below the ceiling, a free slot |
| release_retry_claim | working | the retry's launch, nothing bound |
| delete_spawn | working, canceled | the spawn's launch, nothing bound (a spawn's rollback) |

An ending that is owed to the parent (every terminal transition but a cancellation) gets
its delivery id, due after the notification grace, in the same write: the debt can
neither be lost between the ending and its report nor outlive a retry (which clears it).
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from agentrt.core.ids import new_id
from agentrt.mesh.storage.db import Database
from agentrt.tasks.domain import (
    LIVE,
    Failure,
    Outcome,
    Task,
    TaskStatus,
    attempts_exhausted,
    not_retryable,
    retry_conflict,
    task_limit,
)
from agentrt.tasks.storage.rows import (
    Lost,
    T,
    bump,
    ensure_parent,
    failure_json,
    insert_values,
    key_of,
    live_count,
    to_task,
    transition,
    us,
)

_LIVE = [str(s) for s in LIVE]


class Replay(Exception):
    """claim_spawn found a task under the same idempotency key (attribute `task`)."""

    def __init__(self, task: Task) -> None:
        """Carry the existing task."""
        super().__init__(task.task_id)
        self.task = task


def _owed(grace_s: float, now_s: float) -> dict[str, Any]:
    """Column values that make an ending owed to the parent session."""
    return {"delivery_id": new_id("td"), "delivery_due_us": us(now_s + grace_s), "delivery_base_seq": None}


_NOT_OWED: dict[str, Any] = {"delivery_id": "", "delivery_due_us": None, "delivery_base_seq": None}


class TaskStore:
    """Reads and transitions of the `tasks` table (see the module docstring)."""

    def __init__(self, db: Database, notify_grace_s: float = 2.0) -> None:
        """Wrap db.

        Args:
            db: the task manager's database.
            notify_grace_s: how long an owed ending waits before a deliverer may notify
                it, in seconds (a model waiting on the task in-turn takes it first).
        """
        self.db = db
        self.notify_grace_s = notify_grace_s

    async def _write(self, body: Any) -> Task | None:
        try:
            return await self.db.write_tx(body)  # type: ignore[no-any-return]
        except Lost:
            return None

    # -- reads -------------------------------------------------------------------------------

    async def get(self, tenant: str, task_id: str) -> Task | None:
        """Return the task, or None."""

        async def body(conn: Any) -> Task | None:
            row = (
                await conn.execute(sa.select(T).where(T.c.tenant == tenant, T.c.task_id == task_id))
            ).mappings()
            first = row.first()
            return None if first is None else to_task(first)

        return await self.db.read_tx(body)

    async def by_key(self, tenant: str, key: str) -> Task | None:
        """Return the task spawned with idempotency key, or None."""

        async def body(conn: Any) -> Task | None:
            result = await conn.execute(sa.select(T).where(T.c.tenant == tenant, T.c.idempotency_key == key))
            first = result.mappings().first()
            return None if first is None else to_task(first)

        return await self.db.read_tx(body)

    async def of_session(self, tenant: str, session_id: str) -> Task | None:
        """Return the task whose hidden session is session_id, or None (the depth lookup).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the lookup failed; that is no answer (004 §2.13).
        """

        async def body(conn: Any) -> Task | None:
            result = await conn.execute(
                sa.select(T).where(T.c.tenant == tenant, T.c.session_id == session_id)
            )
            first = result.mappings().first()
            return None if first is None else to_task(first)

        return await self.db.read_tx(body)

    async def page(
        self, tenant: str, parent: tuple[str, int] | None, limit: int, before: tuple[int, str] | None
    ) -> list[Task]:
        """Return up to `limit` tasks, newest first.

        Args:
            tenant: the tenant.
            parent: (parent session id, generation), or None for every task of the tenant.
            limit: at most this many.
            before: the cursor (create time in microseconds, task id) of the last task of
                the previous page, or None for the first page.
        """
        query = sa.select(T).where(T.c.tenant == tenant)
        if parent is not None:
            query = query.where(T.c.parent_session_id == parent[0], T.c.parent_generation == parent[1])
        if before is not None:
            query = query.where(
                sa.or_(
                    T.c.create_time_us < before[0],
                    sa.and_(T.c.create_time_us == before[0], T.c.task_id < before[1]),
                )
            )
        query = query.order_by(T.c.create_time_us.desc(), T.c.task_id.desc()).limit(limit)

        async def body(conn: Any) -> list[Task]:
            return [to_task(r) for r in (await conn.execute(query)).mappings()]

        return await self.db.read_tx(body)

    async def changes(self, tenant: str, parent: str, generation: int, after: int, limit: int) -> list[Task]:
        """Return the parent's tasks whose change_seq is above `after`, in change order."""
        query = (
            sa.select(T)
            .where(T.c.tenant == tenant, T.c.parent_session_id == parent, T.c.parent_generation == generation)
            .where(T.c.change_seq > after)
            .order_by(T.c.change_seq)
            .limit(limit)
        )

        async def body(conn: Any) -> list[Task]:
            return [to_task(r) for r in (await conn.execute(query)).mappings()]

        return await self.db.read_tx(body)

    # -- spawn ---------------------------------------------------------------------------------

    async def claim_spawn(self, task: Task, max_live: int) -> Task:
        """Insert a new task (working, its first launch named) under the live-task cap.

        Raises:
            Replay: a task with the same idempotency key exists (it is returned, not written).
            MeshError: FAILED_PRECONDITION/TASK_LIMIT when the parent has max_live live tasks.
        """

        async def body(conn: Any) -> Task:
            await ensure_parent(conn, task.tenant, task.parent_session_id, task.parent_generation)
            change = await bump(conn, task.tenant, task.parent_session_id, task.parent_generation)
            if task.idempotency_key is not None:
                found = await conn.execute(
                    sa.select(T).where(T.c.tenant == task.tenant, T.c.idempotency_key == task.idempotency_key)
                )
                first = found.mappings().first()
                if first is not None:
                    raise Replay(to_task(first))
            if (
                await live_count(conn, task.tenant, task.parent_session_id, task.parent_generation)
                >= max_live
            ):
                raise task_limit(task.parent_session_id, max_live)
            row = task.with_changes(change_seq=change or 0)
            await conn.execute(sa.insert(T).values(**insert_values(row)))
            return row

        try:
            return await self.db.write_tx(body)
        except IntegrityError:
            # Another replica inserted the same idempotency key first.
            if task.idempotency_key is None:
                raise
            async with self.db.read() as conn:
                found = await conn.execute(
                    sa.select(T).where(T.c.tenant == task.tenant, T.c.idempotency_key == task.idempotency_key)
                )
                first = found.mappings().first()
            if first is None:
                raise
            raise Replay(to_task(first)) from None

    async def set_session(self, task: Task, launch_id: str, session_id: str, generation: int) -> Task | None:
        """Record the hidden session of a spawn's launch; None when the task moved on."""
        where = [T.c.launch_id == launch_id, T.c.status == str(TaskStatus.WORKING), T.c.session_id == ""]
        values = {"session_id": session_id, "session_generation": generation}
        return await self._write(lambda conn: transition(conn, task, where, values))

    async def delete_spawn(self, task: Task, launch_id: str) -> bool:
        """Remove a spawn whose first launch failed (its rollback); False when it moved on."""

        async def body(conn: Any) -> bool:
            await bump(conn, task.tenant, task.parent_session_id, task.parent_generation)
            result = await conn.execute(
                sa.delete(T).where(
                    *key_of(task), T.c.launch_id == launch_id, T.c.run_id == "", T.c.attempt == 1
                )
            )
            return bool(result.rowcount)

        return await self.db.write_tx(body)

    # -- a launch's run ------------------------------------------------------------------------

    async def bind_run(self, task: Task, launch_id: str, run_id: str) -> Task | None:
        """Bind RunService's run id to the launch (the re-read after launching, as a CAS).

        Returns None when the row no longer names this launch as a working one: the task
        was stopped, swept or moved on meanwhile, and the caller cancels the run it started.
        """
        where = [T.c.launch_id == launch_id, T.c.status == str(TaskStatus.WORKING), T.c.run_id == ""]
        return await self._write(lambda conn: transition(conn, task, where, {"run_id": run_id}))

    async def set_workspace(self, task: Task, launch_id: str, workspace: str) -> Task | None:
        """Record the workspace the task's first run got, for the runs after it."""
        where = [T.c.launch_id == launch_id, T.c.workspace == ""]
        return await self._write(lambda conn: transition(conn, task, where, {"workspace": workspace}))

    async def mark_input_required(self, task: Task, launch_id: str) -> Task | None:
        """Working -> input_required, for the named launch's run only."""
        where = [T.c.launch_id == launch_id, T.c.status == str(TaskStatus.WORKING), T.c.run_id != ""]
        values = {"status": str(TaskStatus.INPUT_REQUIRED)}
        return await self._write(lambda conn: transition(conn, task, where, values))

    async def reclaim_working(self, task: Task, launch_id: str) -> Task | None:
        """input_required -> working, for the named launch's run only."""
        where = [T.c.launch_id == launch_id, T.c.status == str(TaskStatus.INPUT_REQUIRED)]
        values = {"status": str(TaskStatus.WORKING)}
        return await self._write(lambda conn: transition(conn, task, where, values))

    async def finalize(
        self,
        task: Task,
        launch_id: str,
        outcome: Outcome,
        summary: str,
        state: str | None = None,
        now_s: float | None = None,
    ) -> Task | None:
        """End the task with outcome while it is live on the named launch.

        Status, result, summary, failure (and the host State, unless None) land in one
        write, with the delivery owed unless the outcome is a cancellation (a person's
        stop is reported as delivered, 004 §2.13). The lease is released.

        Returns:
            The task as written, or None when the row was not live on that launch.
        """
        result = outcome.output if outcome.status == TaskStatus.COMPLETED else ""
        if outcome.status == TaskStatus.FAILED and outcome.failure is not None:
            result = outcome.failure.message
        values: dict[str, Any] = {
            "status": str(outcome.status), "result": result, "summary": summary,
            "failure_json": failure_json(outcome.failure if outcome.status == TaskStatus.FAILED else None),
            "owner": "", "lease_until_us": None,
        }  # fmt: skip
        if state is not None:
            values["state"] = state
        if outcome.status == TaskStatus.CANCELED:
            values.update(_NOT_OWED)
        else:
            values.update(_owed(self.notify_grace_s, time.time() if now_s is None else now_s))
        where = [T.c.launch_id == launch_id, T.c.status.in_(_LIVE)]
        return await self._write(lambda conn: transition(conn, task, where, values))

    async def advance(
        self,
        task: Task,
        from_launch: str,
        to_launch: str,
        max_continuations: int,
        state: str | None = None,
        *,
        owner: str,
        lease_until_s: float,
    ) -> Task | None:
        """Chain the next run: the launch (and State, unless None) replaced in one CAS.

        Only while the task is working on `from_launch` and has chained fewer than
        max_continuations runs since its spawn or last retry. The new launch has no run bound
        yet; the caller starts it and binds it. Like a spawn's and a retry's claim, it takes
        the lease for `owner` until `lease_until_s` (seconds since the epoch), not what was
        left of the previous launch's, maybe in an adopter's name (decision 0052).
        """
        where = [
            T.c.launch_id == from_launch,
            T.c.status == str(TaskStatus.WORKING),
            T.c.continuations < max_continuations,
        ]
        values: dict[str, Any] = {
            "launch_id": to_launch, "run_id": "", "step": T.c.step + 1,
            "continuations": T.c.continuations + 1, "owner": owner, "lease_until_us": us(lease_until_s),
        }  # fmt: skip
        if state is not None:
            values["state"] = state
        return await self._write(lambda conn: transition(conn, task, where, values))

    # -- retry ---------------------------------------------------------------------------------

    async def retry_claim(
        self, task: Task, launch_id: str, owner: str, lease_until_s: float, max_live: int
    ) -> Task:
        """Failed -> working on a new launch, attempt + 1, the result and any debt cleared.

        The predicate: the row is failed on the attempt and launch `task` shows, under its
        attempt ceiling, and its parent has a free live-task slot (a retry takes one).

        Raises:
            MeshError: FAILED_PRECONDITION TASK_NOT_RETRYABLE (not failed),
                TASK_ATTEMPTS_EXHAUSTED (the ceiling), TASK_LIMIT (no free slot);
                ABORTED/RETRY_CONFLICT when a concurrent writer moved it first.
        """
        where = [
            T.c.status == str(TaskStatus.FAILED),
            T.c.attempt == task.attempt,
            T.c.launch_id == task.launch_id,
            T.c.attempt < T.c.max_attempts,
        ]
        values = {
            "status": str(TaskStatus.WORKING), "launch_id": launch_id, "run_id": "",
            "attempt": T.c.attempt + 1, "continuations": 0, "summary": "", "result": "",
            "failure_json": None, "owner": owner, "lease_until_us": us(lease_until_s), **_NOT_OWED,
        }  # fmt: skip

        async def slot(conn: Any) -> None:
            if (
                await live_count(conn, task.tenant, task.parent_session_id, task.parent_generation)
                >= max_live
            ):
                raise task_limit(task.parent_session_id, max_live)

        async def body(conn: Any) -> Task:
            return await transition(conn, task, where, values, check=slot)

        try:
            return await self.db.write_tx(body)
        except Lost:
            now = await self.get(task.tenant, task.task_id)
            if now is None or now.status != TaskStatus.FAILED:
                raise not_retryable(now or task) from None
            if now.attempt >= now.max_attempts:
                raise attempts_exhausted(now) from None
            raise retry_conflict(task.task_id) from None

    async def release_retry_claim(
        self, task: Task, launch_id: str, failure: Failure, hold_s: float = 0.0
    ) -> Task | None:
        """Undo a retry whose run could not be launched: back to failed, attempt - 1 (at least 1).

        The launch failure becomes the task's result and is owed like any ending; with
        hold_s > 0 it is held that long for the caller that will hand it to a model.
        Bound to the retry's launch; None when the row moved on.
        """
        owed = _owed(hold_s if hold_s > 0 else self.notify_grace_s, time.time())
        values = {
            "status": str(TaskStatus.FAILED), "attempt": sa.case((T.c.attempt > 1, T.c.attempt - 1), else_=1),
            "result": failure.message, "summary": "", "failure_json": failure_json(failure),
            "owner": "", "lease_until_us": None, **owed,
        }  # fmt: skip
        where = [T.c.launch_id == launch_id, T.c.status == str(TaskStatus.WORKING), T.c.run_id == ""]
        return await self._write(lambda conn: transition(conn, task, where, values))
