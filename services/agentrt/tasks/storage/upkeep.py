"""The task store's background half: leases, the restart sweep, deliveries, parent trees.

- Leases: the replica that launched (or adopted) a live task follows its run and renews
  `lease_until_us`; a live task whose lease expired is adopted by another replica. A
  lease is not a task change (no change_seq); it locks the task row only.
- The restart sweep (`fail_orphans`, 004 §2.13 FailOrphans): a task recorded as working
  whose launch never got a run bound, and whose lease expired (or is held under this
  replica's own name by a previous life of it), was interrupted mid-launch: nobody can
  tell whether its run started, so it is failed, with its delivery owed in the same
  transaction, and returned so each parent can be told. A launch the sweeping replica is
  starting itself is spared, whatever its lease says (decision 0052). A task whose run was bound is
  not an orphan in the mesh: the run lives in RunService and is adopted instead.
  input_required is left alone: its approval persists.
- Deliveries: an owed ending is claimed by one deliverer at a time (`delivery_due_us`
  pushed forward), its parent's last seq recorded before the notification is appended
  (`delivery_base_seq`), and cleared once delivered. A caller handing a result to a model
  holds it instead (`hold`), and acknowledges it (`ack`).
- Parents: `due_parents` hands out parent incarnations to check against the session
  store; `remove_tree` deletes a parent's tasks at every depth (the rows in both roles)
  and returns them, so the caller can cancel their runs and delete their hidden sessions.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from agentrt.core.ids import new_id
from agentrt.mesh.storage.db import Database
from agentrt.tasks.domain import LIVE, Failure, Task, TaskStatus
from agentrt.tasks.storage.rows import (
    Lost,
    P,
    T,
    bump,
    failure_json,
    key_of,
    parent_key,
    to_task,
    transition,
    us,
)

_LIVE = [str(s) for s in LIVE]
#: delivery_base_seq of a delivery a deliverer claimed before reading the parent's last seq.
CLAIMED = -1


class UpkeepStore:
    """Leases, the restart sweep, deliveries and parent trees (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        """Wrap the task manager's database."""
        self.db = db

    async def _write(self, body: Any) -> Any:
        try:
            return await self.db.write_tx(body)
        except Lost:
            return None

    # -- leases ------------------------------------------------------------------------------

    async def renew(
        self, owner: str, keys: set[tuple[str, str, str]], until_s: float
    ) -> set[tuple[str, str, str]]:
        """Extend owner's leases of the launches this process is busy with; return those still held.

        Args:
            owner: this replica's name.
            keys: (tenant, task_id, launch_id) of every launch being started or followed here;
                a lease nobody here is busy with is left to expire (and be adopted or swept).
            until_s: the new expiry, seconds since the epoch.
        """

        async def body(conn: Any) -> set[tuple[str, str, str]]:
            held = set()
            for tenant, task_id, launch_id in sorted(keys):
                result = await conn.execute(
                    sa.update(T)
                    .where(T.c.tenant == tenant, T.c.task_id == task_id, T.c.launch_id == launch_id)
                    .where(T.c.owner == owner, T.c.status.in_(_LIVE))
                    .values(lease_until_us=us(until_s))
                )
                if result.rowcount:
                    held.add((tenant, task_id, launch_id))
            return held

        if not keys:
            return set()
        return await self.db.write_tx(body)

    async def release_leases(self, owner: str) -> int:
        """Expire owner's leases of bound runs (a clean stop), so another replica adopts them at once."""

        async def body(conn: Any) -> int:
            result = await conn.execute(
                sa.update(T)
                .where(T.c.owner == owner, T.c.status.in_(_LIVE), T.c.run_id != "")
                .values(lease_until_us=0)
            )
            return int(result.rowcount or 0)

        return await self.db.write_tx(body)

    async def adoptable(self, now_s: float, limit: int, stale_owner: str = "") -> list[Task]:
        """Return live tasks with a bound run whose lease expired (or is held by stale_owner)."""
        expired = T.c.lease_until_us < us(now_s)
        if stale_owner:
            expired = sa.or_(expired, T.c.owner == stale_owner)
        query = (
            sa.select(T)
            .where(T.c.status.in_(_LIVE), T.c.run_id != "", T.c.lease_until_us.is_not(None), expired)
            .order_by(T.c.lease_until_us)
            .limit(limit)
        )

        async def body(conn: Any) -> list[Task]:
            return [to_task(r) for r in (await conn.execute(query)).mappings()]

        return await self.db.read_tx(body)

    async def adopt(
        self, task: Task, owner: str, now_s: float, until_s: float, stale_owner: str = ""
    ) -> Task | None:
        """Take task's lease when it is still expired (or stale_owner's) on the same launch."""
        expired = T.c.lease_until_us < us(now_s)
        if stale_owner:
            expired = sa.or_(expired, T.c.owner == stale_owner)

        async def body(conn: Any) -> Task | None:
            result = await conn.execute(
                sa.update(T)
                .where(*key_of(task), T.c.launch_id == task.launch_id, T.c.status.in_(_LIVE), expired)
                .values(owner=owner, lease_until_us=us(until_s))
                .returning(*T.c)
            )
            row = result.mappings().first()
            return None if row is None else to_task(row)

        return await self.db.write_tx(body)

    async def fail_orphans(
        self,
        now_s: float,
        failure: Failure,
        grace_s: float,
        stale_owner: str = "",
        limit: int = 500,
        spare: Collection[tuple[str, str, str]] = (),
    ) -> list[Task]:
        """Fail tasks interrupted mid-launch (see the module docstring); return them as failed.

        One transaction: the failures and their owed deliveries are written together.

        Args:
            now_s: the time leases are compared with.
            failure: what the orphans failed with.
            grace_s: the notification grace of their owed deliveries, in seconds.
            stale_owner: an owner name whose leases count as expired (this replica's own
                name at its start: what it held then, a previous life of it held).
            limit: at most this many per call.
            spare: (tenant, task_id, launch_id) of the launches the calling replica is
                starting itself: never orphans, whatever their lease says (a replica that
                stalled past its lease is still starting them; decision 0052).
        """
        stale = T.c.lease_until_us < us(now_s)
        if stale_owner:
            stale = sa.or_(stale, T.c.owner == stale_owner)
        query = (
            sa.select(T)
            .where(T.c.status == str(TaskStatus.WORKING), T.c.run_id == "", stale)
            .order_by(T.c.tenant, T.c.parent_session_id, T.c.parent_generation, T.c.task_id)
            .limit(limit)
        )

        async def body(conn: Any) -> list[Task]:
            failed = []
            for row in (await conn.execute(query)).mappings().all():
                task = to_task(row)
                if (task.tenant, task.task_id, task.launch_id) in spare:
                    continue
                values = {
                    "status": str(TaskStatus.FAILED), "result": failure.message, "summary": "",
                    "failure_json": failure_json(failure), "owner": "", "lease_until_us": None,
                    "delivery_id": new_id("td"), "delivery_due_us": us(now_s + grace_s),
                    "delivery_base_seq": None,
                }  # fmt: skip
                where = [
                    T.c.launch_id == task.launch_id,
                    T.c.status == str(TaskStatus.WORKING),
                    T.c.run_id == "",
                ]
                try:
                    failed.append(await transition(conn, task, where, values))
                except Lost:
                    continue
            return failed

        return await self.db.write_tx(body)

    # -- deliveries ----------------------------------------------------------------------------

    async def due_deliveries(self, now_s: float, limit: int) -> list[Task]:
        """Return tasks whose owed ending a deliverer may take now, oldest first."""
        query = (
            sa.select(T)
            .where(T.c.delivery_id != "", T.c.delivery_due_us <= us(now_s))
            .order_by(T.c.delivery_due_us)
            .limit(limit)
        )

        async def body(conn: Any) -> list[Task]:
            return [to_task(r) for r in (await conn.execute(query)).mappings()]

        return await self.db.read_tx(body)

    async def claim_delivery(self, task: Task, now_s: float, until_s: float) -> tuple[Task, int] | None:
        """Claim task's owed delivery until until_s; return (the task, its recorded base seq).

        The base seq is CLAIMED when no deliverer has read the parent's last seq yet.
        None when the delivery is gone, held, or claimed by another deliverer.
        """

        async def body(conn: Any) -> tuple[Task, int] | None:
            result = await conn.execute(
                sa.update(T)
                .where(*key_of(task), T.c.delivery_id == task.delivery_id, T.c.delivery_due_us <= us(now_s))
                .values(
                    delivery_due_us=us(until_s),
                    delivery_base_seq=sa.func.coalesce(T.c.delivery_base_seq, CLAIMED),
                )
                .returning(*T.c)
            )
            row = result.mappings().first()
            return None if row is None else (to_task(row), int(row["delivery_base_seq"]))

        return await self.db.write_tx(body)

    async def set_delivery_base(self, task: Task, delivery_id: str, seq: int) -> bool:
        """Record the parent's last seq read before appending (only for a fresh claim)."""
        return await self._simple(
            task,
            [T.c.delivery_id == delivery_id, T.c.delivery_base_seq == CLAIMED],
            {"delivery_base_seq": seq},
        )

    async def release_delivery(self, task: Task, delivery_id: str, retry_at_s: float) -> bool:
        """Give a claimed delivery back, to be tried again at retry_at_s.

        A claim that never read the parent's seq appended nothing, so it is cleared: the
        delivery may be held for a model again.
        """
        base = sa.case((T.c.delivery_base_seq == CLAIMED, sa.null()), else_=T.c.delivery_base_seq)
        values = {"delivery_due_us": us(retry_at_s), "delivery_base_seq": base}
        return await self._simple(task, [T.c.delivery_id == delivery_id], values)

    async def delivered(self, task: Task, delivery_id: str, seq: int) -> Task | None:
        """The notification of delivery_id is in the parent session at seq: clear the debt.

        In the same transaction the parent's wake is owed (due now; delivery/wake.py).
        """
        where = [T.c.delivery_id == delivery_id]
        values = {
            "delivery_id": "", "delivery_due_us": None, "delivery_base_seq": None, "notified_seq": seq,
            "wake_seq": seq, "wake_due_us": sa.func.coalesce(T.c.wake_due_us, 0),
        }  # fmt: skip
        return await self._write(lambda conn: transition(conn, task, where, values))  # type: ignore[no-any-return]

    async def hold(self, task: Task, delivery_id: str, until_s: float) -> bool:
        """Hold an owed delivery for a caller handing it to a model, until until_s.

        False when it is no longer owed, or a deliverer has already begun on it.
        """
        return await self._simple(
            task,
            [T.c.delivery_id == delivery_id, T.c.delivery_base_seq.is_(None)],
            {"delivery_due_us": us(until_s)},
        )

    async def ack(self, task: Task, delivery_id: str) -> Task | None:
        """The model has the ending of delivery_id (004 §2.13 OnResultDelivered): clear it."""
        where = [T.c.delivery_id == delivery_id]
        values = {"delivery_id": "", "delivery_due_us": None, "delivery_base_seq": None}
        return await self._write(lambda conn: transition(conn, task, where, values))  # type: ignore[no-any-return]

    async def _simple(self, task: Task, where: list[Any], values: dict[str, Any]) -> bool:
        async def body(conn: Any) -> bool:
            result = await conn.execute(sa.update(T).where(*key_of(task), *where).values(**values))
            return bool(result.rowcount)

        return await self.db.write_tx(body)

    # -- parents -------------------------------------------------------------------------------

    async def due_parents(self, now_s: float, period_s: float, limit: int) -> list[tuple[str, str, int]]:
        """Claim up to `limit` parents last checked over period_s ago; return their keys."""
        cutoff = us(now_s - period_s)

        async def body(conn: Any) -> list[tuple[str, str, int]]:
            rows = (
                await conn.execute(
                    sa.select(P.c.tenant, P.c.parent_session_id, P.c.parent_generation, P.c.checked_us)
                    .where(P.c.checked_us < cutoff)
                    .order_by(P.c.checked_us)
                    .limit(limit)
                )
            ).all()
            claimed = []
            for r in rows:
                done = await conn.execute(
                    sa.update(P)
                    .where(*parent_key(r[0], r[1], r[2]), P.c.checked_us == r[3])
                    .values(checked_us=us(now_s))
                )
                if done.rowcount:
                    claimed.append((r[0], r[1], int(r[2])))
            return claimed

        return await self.db.write_tx(body)

    async def parent_generations(self, tenant: str, parent: str) -> list[int]:
        """Return the generations of parent that have task rows."""

        async def body(conn: Any) -> list[int]:
            result = await conn.execute(
                sa.select(P.c.parent_generation).where(P.c.tenant == tenant, P.c.parent_session_id == parent)
            )
            return [int(g) for g in result.scalars()]

        return await self.db.read_tx(body)

    async def parent_exists(self, tenant: str, parent: str, generation: int) -> bool:
        """True while the parent incarnation's tasks have not been removed."""

        async def body(conn: Any) -> bool:
            found = await conn.scalar(
                sa.select(P.c.last_change).where(*parent_key(tenant, parent, generation))
            )
            return found is not None

        return await self.db.read_tx(body)

    async def remove_tree(self, tenant: str, parent: str, generation: int) -> list[Task]:
        """Delete the parent's tasks at every depth and their parent rows; return the tasks removed.

        A task's hidden session is the parent of the tasks it spawned, so the removal
        walks down through them in one transaction, locking each parent row before its
        tasks, as every writer does.
        """

        async def body(conn: Any) -> list[Task]:
            removed: list[Task] = []
            frontier = [(parent, generation)]
            seen: set[tuple[str, int]] = set()
            while frontier:
                key = frontier.pop()
                if key in seen:
                    continue
                seen.add(key)
                await bump(conn, tenant, key[0], key[1])
                rows = await conn.execute(
                    sa.delete(T)
                    .where(
                        T.c.tenant == tenant, T.c.parent_session_id == key[0], T.c.parent_generation == key[1]
                    )
                    .returning(*T.c)
                )
                for row in rows.mappings().all():
                    task = to_task(row)
                    removed.append(task)
                    if task.session_id:
                        frontier.append((task.session_id, task.session_generation))
                await conn.execute(sa.delete(P).where(*parent_key(tenant, key[0], key[1])))
            return removed

        return await self.db.write_tx(body)
