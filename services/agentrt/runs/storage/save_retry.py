"""The save point through transient database failures: retried, and in effect once (issue 13).

A save point is one transaction (runs/storage/store.py `RunStore.save`). When it fails transiently
(mesh/storage/transient.py: the connection was terminated or reset, a serialization failure, a
deadlock) it is run again, with bounded backoff, instead of failing the run:

- a failure before COMMIT was sent rolled everything back: the transaction runs again, its
  fencing guard evaluated afresh (a lease lost meanwhile is still refused, never retried);
- a failure during COMMIT leaves the outcome unknown: the run row's `update_time_s`, which
  every save sets to its own mark, says whether it landed. When it did, the save is not run
  again (no log row or event twice); the events it numbered are read back.

The fencing refusal (`_GuardFailed` in store.py) is not an error of the database and goes
straight back to the caller. Once the tries are spent the last error is raised (the run
fails `internal`, as before).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sqlalchemy import select

from agentrt.mesh.storage.transient import RetryPolicy, retry_transient
from agentrt.runs.domain import StoredEvent
from agentrt.runs.storage.models import RunRow

if TYPE_CHECKING:
    from agentrt.runs.storage.store import RunStore

#: Tries of one save point: about 6 s of backoff in all before the run fails.
SAVE_POLICY = RetryPolicy(attempts=8, first_delay_s=0.05, max_delay_s=2.0)


async def save_with_retries(
    store: RunStore,
    run_id: str,
    attempt: Callable[[], Awaitable[list[StoredEvent]]],
    reached_commit: Callable[[], bool],
    marker: float,
    numbered: int,
) -> list[StoredEvent]:
    """Run one save point's transaction through transient failures (see the module docstring).

    Args:
        store: the run store (for the outcome check and the read-back).
        run_id: the run saved.
        attempt: the whole transaction; raises store's guard failure when a guard fails.
        reached_commit: True when the last attempt's body ran to its end (COMMIT was next).
        marker: the `update_time_s` the transaction writes.
        numbered: how many events the transaction numbers itself (read back when needed).

    Raises:
        Exception: a failure that is not transient, or the last transient one.
    """

    async def committed() -> bool:
        if not reached_commit():
            return False  # rolled back before COMMIT: nothing of it landed
        async with store.db.read() as conn:
            got = await conn.scalar(select(RunRow.update_time_s).where(RunRow.run_id == run_id))
        return got == marker

    async def read_back() -> list[StoredEvent]:
        if not numbered:
            return []
        return (await store.read_events(run_id, 0))[-numbered:]

    return await retry_transient(
        attempt,
        what=f"save point of run {run_id}",
        policy=SAVE_POLICY,
        committed=committed,
        on_committed=read_back,
    )
