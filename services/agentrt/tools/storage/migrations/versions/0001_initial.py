"""The tool service's first tables: tool_executions (the journal) and tool_sandboxes.

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
    """Create the two tables (see agentrt.tools.storage.models)."""
    op.create_table(
        "tool_executions",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "run_id", "call_id"),
    )
    op.create_table(
        "tool_sandboxes",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("sandbox_id", sa.String(128), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("workspace", sa.Text(), nullable=False),
        sa.Column("owns_workspace", sa.Boolean(), nullable=False),
        sa.Column("settings_json", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "sandbox_id"),
    )


def downgrade() -> None:
    """Drop the two tables."""
    op.drop_table("tool_sandboxes")
    op.drop_table("tool_executions")
