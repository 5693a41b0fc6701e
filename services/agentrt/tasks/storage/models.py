"""The task manager's tables (SQLAlchemy 2, typed `Mapped[...]` columns).

- `tasks`: one row per task (004 §2.13). Sessions are named by id AND generation, the
  parent's and the hidden session's, so a row never attaches itself to a later
  incarnation of the same id. `launch_id` names the current run (minted before the run
  is asked for); every attempt-scoped write carries it in its WHERE clause. `owner` and
  `lease_until_us` say which replica follows the run of a live task (NULL once terminal).
  `delivery_id` is the ending still owed to the parent session ("" when none), written in
  the same transaction as the ending itself; `delivery_due_us` is when a deliverer may
  take it (pushed back by a hold or a deliverer's claim), `delivery_base_seq` the parent
  session's last seq read before the notification was appended (so a deliverer that died
  after appending finds its entry instead of appending a second).
- `task_parents`: one row per parent session incarnation that has tasks. Every write to
  one of its tasks locks this row first (so the live-task count is exact across
  replicas, and writers never lock in opposite orders) and takes the next `last_change`
  as the task's `change_seq`, the cursor of WatchTasks. `checked_us` is when a replica
  last asked the session store whether the parent still exists.

Times are integer microseconds since the Unix epoch. Schema changes go through Alembic
(agentrt/tasks/storage/migrations); `metadata` here is what the migrations must produce.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Index, Integer, LargeBinary, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

ID = String(128)
TENANT = String(64)


class Base(DeclarativeBase):
    """Declarative base of the task manager's tables (its own MetaData)."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class TaskRow(Base):
    """One task (see `agentrt.tasks.domain.Task` for the fields)."""

    __tablename__ = "tasks"

    tenant: Mapped[str] = mapped_column(TENANT, primary_key=True)
    task_id: Mapped[str] = mapped_column(ID, primary_key=True)
    parent_session_id: Mapped[str] = mapped_column(ID)
    parent_generation: Mapped[int] = mapped_column(BigInteger)
    parent_run_id: Mapped[str] = mapped_column(ID, default="")
    session_id: Mapped[str] = mapped_column(ID, default="")
    session_generation: Mapped[int] = mapped_column(BigInteger, default=0)
    depth: Mapped[int] = mapped_column(Integer, default=1)
    kind: Mapped[str] = mapped_column(String(64), default="")
    label: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(Text, default="")
    agent_name: Mapped[str] = mapped_column(String(64), default="")
    agent_version: Mapped[int] = mapped_column(Integer, default=0)
    agent_spec: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    input: Mapped[str] = mapped_column(Text)
    steps_json: Mapped[str] = mapped_column(Text, default="[]")
    step: Mapped[int] = mapped_column(Integer, default=0)
    workspace: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16))
    launch_id: Mapped[str] = mapped_column(ID)
    run_id: Mapped[str] = mapped_column(ID, default="")
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    max_attempts: Mapped[int] = mapped_column(Integer)
    continuations: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[str] = mapped_column(Text, default="")
    failure_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    owner: Mapped[str] = mapped_column(String(128), default="")
    lease_until_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    delivery_id: Mapped[str] = mapped_column(ID, default="")
    delivery_due_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    delivery_base_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    notified_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Seq of the notification whose wake of the parent is owed (0 = none; delivery/wake.py).
    wake_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    #: When a waker may take the owed wake (None = nothing owed), microseconds since the epoch.
    wake_due_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    change_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    create_time_us: Mapped[int] = mapped_column(BigInteger)
    update_time_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        Index(None, "tenant", "parent_session_id", "parent_generation", "status"),
        Index(None, "tenant", "parent_session_id", "parent_generation", "change_seq"),
        Index(None, "tenant", "create_time_us", "task_id"),
        Index(None, "tenant", "session_id"),
        Index(None, "tenant", "idempotency_key", unique=True),
        Index(None, "lease_until_us"),
        Index(None, "delivery_due_us"),
        Index(None, "wake_due_us"),
    )


class ParentRow(Base):
    """A parent session incarnation with tasks: the lock, the change counter, the liveness check."""

    __tablename__ = "task_parents"

    tenant: Mapped[str] = mapped_column(TENANT, primary_key=True)
    parent_session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    parent_generation: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    last_change: Mapped[int] = mapped_column(BigInteger, default=0)
    checked_us: Mapped[int] = mapped_column(BigInteger, default=0)

    __table_args__ = (Index(None, "checked_us"),)


metadata = Base.metadata
