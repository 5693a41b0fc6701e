"""The wake a notification owes its parent: tasks.wake_seq, tasks.wake_due_us.

Revision ID: 0002_task_wakes
Revises: 0001_tasks
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_task_wakes"
down_revision = "0001_tasks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the wake columns (no wake owed for existing rows) and the due index."""
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("wake_seq", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("wake_due_us", sa.BigInteger(), nullable=True))
    op.create_index("ix_tasks_wake_due_us", "tasks", ["wake_due_us"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("ix_tasks_wake_due_us", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("wake_due_us")
        batch.drop_column("wake_seq")
