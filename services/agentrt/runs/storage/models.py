"""The run loop's tables (SQLAlchemy 2, typed columns): agents, runs, run log, run events.

Invariants:
- every row is scoped by tenant (agents, runs, events); another tenant's row is never
  returned;
- `run_log` and `run_events` are append-only and keyed (run_id, seq); seqs start at 1
  and have no holes; every run_log row carries the fencing token and lease owner it was
  written under;
- protobuf values (agent specs, usage, failures, pending calls, events) are stored as
  their serialized bytes so a field added to the contract round-trips without a migration;
- times are float seconds since the epoch (`*_s`);
- at most one unfinished (RUNNING or SUSPENDED) run per session: a partial unique index,
  so the busy check and the insert are one step on every backend;
- the schema is managed by Alembic (`runs/storage/migrations/`, `agentrt.runs.migrate`).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: RUNNING (1) and SUSPENDED (2), the unfinished statuses (common.proto RunStatus).
_UNFINISHED = text("status IN (1, 2)")


class Base(DeclarativeBase):
    """Declarative base of the runs tables."""

    metadata = MetaData()


class AgentRow(Base):
    """One version of a registered agent spec."""

    __tablename__ = "agents"
    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    spec: Mapped[bytes] = mapped_column(LargeBinary)
    create_time_s: Mapped[float] = mapped_column(Float)


class RunRow(Base):
    """A run's record: status, progress, the agent snapshot, lease and queues."""

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("tenant", "idempotency_key", name="uq_runs_idempotency"),
        Index("ix_runs_tenant_session", "tenant", "session_id"),
        Index("ix_runs_status_lease", "status", "lease_expires_s"),
        Index("ix_runs_status_deadline", "status", "deadline_s"),
        Index(
            "uq_runs_unfinished_session",
            "tenant",
            "session_id",
            unique=True,
            postgresql_where=_UNFINISHED,
            sqlite_where=_UNFINISHED,
        ),
    )
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    session_id: Mapped[str] = mapped_column(String(128))
    agent_name: Mapped[str] = mapped_column(String(64))
    agent_version: Mapped[int] = mapped_column(Integer, default=0)
    #: The agent snapshot the run executes (AgentSpec bytes, model and defaults resolved).
    agent: Mapped[bytes] = mapped_column(LargeBinary)
    input: Mapped[str] = mapped_column(Text)
    workspace: Mapped[str] = mapped_column(Text, default="")
    labels_json: Mapped[str] = mapped_column(Text, default="{}")
    idempotency_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    status: Mapped[int] = mapped_column(Integer)
    phase: Mapped[int] = mapped_column(Integer)
    #: Turns whose save point was reached.
    turns: Mapped[int] = mapped_column(Integer, default=0)
    #: Total usage (Usage bytes).
    usage: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    final_output: Mapped[str] = mapped_column(Text, default="")
    #: FailureInfo bytes when failed.
    failure: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    #: RunSuspended bytes (the pending calls) while suspended.
    pending: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    #: ResumeRunRequest bytes accumulating the answers received while suspended.
    answers: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    #: Tool names approved with `always` (JSON list).
    always_approved_json: Mapped[str] = mapped_column(Text, default="[]")
    #: Injected input not consumed yet (JSON list of {"id", "kind", "text"}).
    pending_input_json: Mapped[str] = mapped_column(Text, default="[]")
    #: The highest session seq this run has read or written (expected_last_seq of appends).
    session_last_seq: Mapped[int] = mapped_column(Integer, default=0)
    consecutive_error_turns: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    cancel_reason: Mapped[str] = mapped_column(Text, default="")
    lease_owner: Mapped[str] = mapped_column(String(128), default="")
    lease_expires_s: Mapped[float] = mapped_column(Float, default=0.0)
    fencing_token: Mapped[int] = mapped_column(Integer, default=0)
    create_time_s: Mapped[float] = mapped_column(Float)
    update_time_s: Mapped[float] = mapped_column(Float)
    #: The highest run seq / session seq the owning executor may have delivered: it
    #: publishes provisional events only below this mark, and a replica that takes over
    #: numbers after it (004 §2.11).
    event_seq_reserved: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    session_seq_reserved: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: When the time budget ends, seconds since the epoch; 0 = no budget.
    deadline_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    #: Small run state read with the row (JSON object; see runs/domain.py RunRecord.state).
    state_json: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")


class RunLogRow(Base):
    """One transition of a run, written before it is acted on."""

    __tablename__ = "run_log"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    #: JSON object; protobuf values inside are in their JSON mapping.
    payload: Mapped[str] = mapped_column(Text)
    time_s: Mapped[float] = mapped_column(Float)
    #: The run's fencing token and lease owner when the entry was written (the same
    #: transaction as the fenced run-row update; "" = no lease held, e.g. a resume).
    fencing_token: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_owner: Mapped[str] = mapped_column(String(128), default="", server_default="")


class RunEventRow(Base):
    """One published event, kept for replay by run (seq) and by session (session_seq)."""

    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_session", "tenant", "session_id", "session_seq"),)
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    session_id: Mapped[str] = mapped_column(String(128))
    session_seq: Mapped[int] = mapped_column(Integer)
    #: RunEvent bytes, its seq being the run's.
    event: Mapped[bytes] = mapped_column(LargeBinary)
