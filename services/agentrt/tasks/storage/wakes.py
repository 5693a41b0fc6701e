"""The wakes owed to parents: which notifications still need their parent run woken (004 §2.13).

A wake is owed from the transaction that records a notification's seq (`UpkeepStore.delivered`
sets `wake_seq` and makes it due) until a waker has started the parent's follow-up turn
(delivery/wake.py). One waker at a time holds it (`wake_due_us` pushed forward, a
compare-and-set on the seq it read), so two replicas never wake one notification twice; a
waker that dies lets its claim expire and another takes it over. Waking is no task change
(no change_seq): it locks the task row only.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from agentrt.mesh.storage.db import Database
from agentrt.tasks.domain import Task
from agentrt.tasks.storage.rows import T, key_of, to_task, us


class WakeStore:
    """Reads and claims owed wakes (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        """Wrap the task manager's database."""
        self.db = db

    async def due(self, now_s: float, limit: int) -> list[tuple[Task, int]]:
        """Return up to `limit` (task, wake seq) whose wake a waker may take now, oldest first."""
        query = (
            sa.select(T)
            .where(T.c.wake_seq > 0, T.c.wake_due_us <= us(now_s))
            .order_by(T.c.wake_due_us)
            .limit(limit)
        )

        async def body(conn: Any) -> list[tuple[Task, int]]:
            return [(to_task(r), int(r["wake_seq"])) for r in (await conn.execute(query)).mappings()]

        return await self.db.read_tx(body)

    async def claim(self, task: Task, seq: int, now_s: float, until_s: float) -> bool:
        """Claim the wake of notification `seq` until until_s; False when gone or claimed."""
        return await self._update(
            task,
            [T.c.wake_seq == seq, T.c.wake_due_us <= us(now_s)],
            {"wake_due_us": us(until_s)},
        )

    async def release(self, task: Task, seq: int, retry_at_s: float) -> bool:
        """Give a claimed wake back, to be tried again at retry_at_s."""
        return await self._update(task, [T.c.wake_seq == seq], {"wake_due_us": us(retry_at_s)})

    async def done(self, task: Task, seq: int) -> bool:
        """The parent was woken for notification `seq` (or needs no wake): nothing more is owed."""
        return await self._update(task, [T.c.wake_seq == seq], {"wake_seq": 0, "wake_due_us": None})

    async def _update(self, task: Task, where: list[Any], values: dict[str, Any]) -> bool:
        async def body(conn: Any) -> bool:
            result = await conn.execute(sa.update(T).where(*key_of(task), *where).values(**values))
            return bool(result.rowcount)

        return await self.db.write_tx(body)
