"""The tool service's tables: the execution journal and the sandboxes.

Invariants:
- `tool_executions` has one row per (tenant, run_id, call_id, attempt): state "started"
  until the call ends, then "finished" with the result; a finished row never changes again.
  The caller going away does not end a call; only its deadline or a cancel does.
- `owner` names the process instance running a started call and `heartbeat_at` is
  refreshed while it runs, so another process can tell an orphan from a call in flight.
- `tool_sandboxes` has one row per (tenant, sandbox_id); `fingerprint` hashes every
  setting that makes the sandbox what it is (004 §2.7n).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, String, Text, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of the tool service's tables (its own metadata)."""


class Execution(Base):
    """One journaled tool call."""

    __tablename__ = "tool_executions"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    #: The call id, or "<call_id>#<attempt>" for a re-run (store.CallKey.column).
    call_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64))
    #: sha256 of the tool name and the exact argument text; a reused call id must match it.
    fingerprint: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    #: `Outcome.to_json()` once finished.
    result_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: Set by CancelExecution on another process; the owner kills the call at its heartbeat.
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class SandboxRow(Base):
    """One sandbox (local backend: a workspace directory plus settings)."""

    __tablename__ = "tool_sandboxes"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    sandbox_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    backend: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    workspace: Mapped[str] = mapped_column(Text)
    #: True when the service created the workspace (DestroySandbox then removes it).
    owns_workspace: Mapped[bool] = mapped_column(Boolean)
    #: JSON object: env, limits.
    settings_json: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
