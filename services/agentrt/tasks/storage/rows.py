"""Rows of the task tables <-> `Task`, and the one write pattern every transition shares.

`transition(conn, task, where, values)` is how a task row changes: it locks the task's
parent row first (incrementing its change counter, which becomes the task's
`change_seq`), then updates the task row only where the compare-and-set predicate still
holds. A lost predicate raises `Lost`, which rolls the whole transaction back, change
counter included; the store turns it into "None: the row had moved on". Locking the
parent before the task everywhere is what keeps two writers from waiting on each other
in opposite orders on PostgreSQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.tasks.domain import Failure, Task, TaskStatus
from agentrt.tasks.storage.models import ParentRow, TaskRow

T = cast(sa.Table, TaskRow.__table__)
P = cast(sa.Table, ParentRow.__table__)


class Lost(Exception):
    """A compare-and-set predicate no longer held (raised inside a transaction to roll it back)."""


def us(seconds: float) -> int:
    """Seconds since the epoch -> integer microseconds."""
    return int(seconds * 1_000_000)


def now_us() -> int:
    """The current time in microseconds since the epoch."""
    return us(time.time())


def failure_json(failure: Failure | None) -> str | None:
    """Encode a failure for the `failure_json` column."""
    if failure is None:
        return None
    return json.dumps(
        {
            "kind": failure.kind,
            "message": failure.message,
            "retryable": failure.retryable,
            "reason": failure.reason,
        }
    )


def _failure(text: str | None) -> Failure | None:
    if not text:
        return None
    data = json.loads(text)
    return Failure(data["kind"], data["message"], bool(data.get("retryable", True)), data.get("reason", ""))


def to_task(row: Mapping[Any, Any]) -> Task:
    """Build the domain Task of a `tasks` row."""
    lease = row["lease_until_us"]
    return Task(
        tenant=row["tenant"], task_id=row["task_id"], parent_session_id=row["parent_session_id"],
        parent_generation=row["parent_generation"], parent_run_id=row["parent_run_id"],
        session_id=row["session_id"], session_generation=row["session_generation"], depth=row["depth"],
        kind=row["kind"], label=row["label"], state=row["state"], agent_name=row["agent_name"],
        agent_version=row["agent_version"], agent_spec=row["agent_spec"], input=row["input"],
        steps=tuple(json.loads(row["steps_json"])), step=row["step"], workspace=row["workspace"],
        status=TaskStatus(row["status"]), launch_id=row["launch_id"], run_id=row["run_id"],
        attempt=row["attempt"], max_attempts=row["max_attempts"], continuations=row["continuations"],
        summary=row["summary"], result=row["result"], failure=_failure(row["failure_json"]),
        owner=row["owner"], lease_until=None if lease is None else lease / 1e6,
        delivery_id=row["delivery_id"], notified_seq=row["notified_seq"],
        idempotency_key=row["idempotency_key"], change_seq=row["change_seq"],
        create_time=row["create_time_us"] / 1e6, update_time=row["update_time_us"] / 1e6,
    )  # fmt: skip


def insert_values(task: Task) -> dict[str, Any]:
    """Return the column values of a new row for task."""
    return {
        "tenant": task.tenant, "task_id": task.task_id, "parent_session_id": task.parent_session_id,
        "parent_generation": task.parent_generation, "parent_run_id": task.parent_run_id,
        "session_id": task.session_id, "session_generation": task.session_generation, "depth": task.depth,
        "kind": task.kind, "label": task.label, "state": task.state, "agent_name": task.agent_name,
        "agent_version": task.agent_version, "agent_spec": task.agent_spec, "input": task.input,
        "steps_json": json.dumps(list(task.steps)), "step": task.step, "workspace": task.workspace,
        "status": str(task.status), "launch_id": task.launch_id, "run_id": task.run_id,
        "attempt": task.attempt, "max_attempts": task.max_attempts, "continuations": task.continuations,
        "summary": task.summary, "result": task.result, "failure_json": failure_json(task.failure),
        "owner": task.owner, "lease_until_us": None if task.lease_until is None else us(task.lease_until),
        "delivery_id": task.delivery_id, "delivery_due_us": None, "delivery_base_seq": None,
        "notified_seq": task.notified_seq, "idempotency_key": task.idempotency_key,
        "change_seq": task.change_seq, "create_time_us": us(task.create_time),
        "update_time_us": us(task.update_time),
    }  # fmt: skip


def key_of(task: Task) -> list[sa.ColumnElement[bool]]:
    """The WHERE clause naming task's row."""
    return [T.c.tenant == task.tenant, T.c.task_id == task.task_id]


def parent_key(tenant: str, parent: str, generation: int) -> list[sa.ColumnElement[bool]]:
    """The WHERE clause naming a parent row."""
    return [P.c.tenant == tenant, P.c.parent_session_id == parent, P.c.parent_generation == generation]


async def ensure_parent(conn: AsyncConnection, tenant: str, parent: str, generation: int) -> None:
    """Insert the parent row when missing (concurrent inserts are fine)."""
    values = {"tenant": tenant, "parent_session_id": parent, "parent_generation": generation,
              "last_change": 0, "checked_us": now_us()}  # fmt: skip
    insert = postgresql.insert(P) if conn.dialect.name == "postgresql" else sqlite.insert(P)
    await conn.execute(insert.values(**values).on_conflict_do_nothing())


async def live_count(conn: AsyncConnection, tenant: str, parent: str, generation: int) -> int:
    """Count the parent's working and input_required tasks."""
    count = await conn.scalar(
        sa.select(sa.func.count())
        .select_from(T)
        .where(T.c.tenant == tenant, T.c.parent_session_id == parent, T.c.parent_generation == generation)
        .where(T.c.status.in_([str(TaskStatus.WORKING), str(TaskStatus.INPUT_REQUIRED)]))
    )
    return int(count or 0)


async def bump(conn: AsyncConnection, tenant: str, parent: str, generation: int) -> int | None:
    """Lock the parent row and take its next change number; None when the row is gone."""
    result = await conn.execute(
        sa.update(P)
        .where(*parent_key(tenant, parent, generation))
        .values(last_change=P.c.last_change + 1)
        .returning(P.c.last_change)
    )
    return result.scalar()


async def transition(
    conn: AsyncConnection,
    task: Task,
    where: Sequence[sa.ColumnElement[bool]],
    values: Mapping[str, Any],
    check: Callable[[AsyncConnection], Awaitable[None]] | None = None,
) -> Task:
    """Apply values to task's row where the predicate holds; return the row as written.

    Args:
        conn: the transaction.
        task: the row (its tenant, id and parent are read; they never change).
        where: the compare-and-set predicate.
        values: the new column values.
        check: awaited after the parent is locked and before the write (a count under
            the lock); what it raises rolls the transaction back.

    Raises:
        Lost: the parent row is gone (the tree was removed) or the predicate failed.
    """
    change = await bump(conn, task.tenant, task.parent_session_id, task.parent_generation)
    if change is None:
        raise Lost
    if check is not None:
        await check(conn)
    result = await conn.execute(
        sa.update(T)
        .where(*key_of(task), *where)
        .values(**values, change_seq=change, update_time_us=now_us())
        .returning(*T.c)
    )
    row = result.mappings().first()
    if row is None:
        raise Lost
    return to_task(row)
