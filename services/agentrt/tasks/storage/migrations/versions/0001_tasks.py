"""The task manager's first tables: tasks, task_parents.

Revision ID: 0001_tasks
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_tasks"
down_revision = None
branch_labels = None
depends_on = None

_TASK_INDEXES = {
    "ix_tasks_tenant_parent_session_id_parent_generation_status": (
        ["tenant", "parent_session_id", "parent_generation", "status"], False),
    "ix_tasks_tenant_parent_session_id_parent_generation_change_seq": (
        ["tenant", "parent_session_id", "parent_generation", "change_seq"], False),
    "ix_tasks_tenant_create_time_us_task_id": (["tenant", "create_time_us", "task_id"], False),
    "ix_tasks_tenant_session_id": (["tenant", "session_id"], False),
    "ix_tasks_tenant_idempotency_key": (["tenant", "idempotency_key"], True),
    "ix_tasks_lease_until_us": (["lease_until_us"], False),
    "ix_tasks_delivery_due_us": (["delivery_due_us"], False),
}  # fmt: skip


def upgrade() -> None:
    """Create the two tables and their indexes (see agentrt.tasks.storage.models)."""
    op.create_table(
        "task_parents",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("parent_session_id", sa.String(128), nullable=False),
        sa.Column("parent_generation", sa.BigInteger(), nullable=False),
        sa.Column("last_change", sa.BigInteger(), nullable=False),
        sa.Column("checked_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "parent_session_id", "parent_generation", name="pk_task_parents"),
    )
    op.create_index("ix_task_parents_checked_us", "task_parents", ["checked_us"])
    op.create_table(
        "tasks",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("parent_session_id", sa.String(128), nullable=False),
        sa.Column("parent_generation", sa.BigInteger(), nullable=False),
        sa.Column("parent_run_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("session_generation", sa.BigInteger(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("agent_version", sa.Integer(), nullable=False),
        sa.Column("agent_spec", sa.LargeBinary(), nullable=True),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("steps_json", sa.Text(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("workspace", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("launch_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("continuations", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("failure_json", sa.Text(), nullable=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("lease_until_us", sa.BigInteger(), nullable=True),
        sa.Column("delivery_id", sa.String(128), nullable=False),
        sa.Column("delivery_due_us", sa.BigInteger(), nullable=True),
        sa.Column("delivery_base_seq", sa.BigInteger(), nullable=True),
        sa.Column("notified_seq", sa.BigInteger(), nullable=False),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("change_seq", sa.BigInteger(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.Column("update_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "task_id", name="pk_tasks"),
    )
    for name, (columns, unique) in _TASK_INDEXES.items():
        op.create_index(name, "tasks", columns, unique=unique)


def downgrade() -> None:
    """Drop the tables (and every task with them)."""
    for name in _TASK_INDEXES:
        op.drop_index(name, table_name="tasks")
    op.drop_table("tasks")
    op.drop_index("ix_task_parents_checked_us", table_name="task_parents")
    op.drop_table("task_parents")
