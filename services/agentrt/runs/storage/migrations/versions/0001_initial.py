"""The run loop's first tables: agents, runs, run_log, run_events (as `create_all` made them).

A database made before the run loop had migrations (by `create_all` in the ready hook) is
stamped at this revision by `agentrt.runs.migrate.upgrade`, then upgraded from here.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the four tables (see agentrt.runs.models)."""
    op.create_table(
        "agents",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", sa.LargeBinary(), nullable=False),
        sa.Column("create_time_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "name", "version"),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("agent_version", sa.Integer(), nullable=False),
        sa.Column("agent", sa.LargeBinary(), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("workspace", sa.Text(), nullable=False),
        sa.Column("labels_json", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("phase", sa.Integer(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("usage", sa.LargeBinary(), nullable=False),
        sa.Column("final_output", sa.Text(), nullable=False),
        sa.Column("failure", sa.LargeBinary(), nullable=True),
        sa.Column("pending", sa.LargeBinary(), nullable=True),
        sa.Column("answers", sa.LargeBinary(), nullable=True),
        sa.Column("always_approved_json", sa.Text(), nullable=False),
        sa.Column("pending_input_json", sa.Text(), nullable=False),
        sa.Column("session_last_seq", sa.Integer(), nullable=False),
        sa.Column("consecutive_error_turns", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("cancel_reason", sa.Text(), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=False),
        sa.Column("lease_expires_s", sa.Float(), nullable=False),
        sa.Column("fencing_token", sa.Integer(), nullable=False),
        sa.Column("create_time_s", sa.Float(), nullable=False),
        sa.Column("update_time_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_runs_idempotency"),
    )
    op.create_index("ix_runs_tenant_session", "runs", ["tenant", "session_id"])
    op.create_index("ix_runs_status_lease", "runs", ["status", "lease_expires_s"])
    op.create_table(
        "run_log",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("session_seq", sa.Integer(), nullable=False),
        sa.Column("event", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    op.create_index("ix_run_events_session", "run_events", ["tenant", "session_id", "session_seq"])


def downgrade() -> None:
    """Drop the four tables."""
    op.drop_table("run_events")
    op.drop_table("run_log")
    op.drop_table("runs")
    op.drop_table("agents")
