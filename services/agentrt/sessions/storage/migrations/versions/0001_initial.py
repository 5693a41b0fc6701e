"""The session store's first tables: sessions, session_entries, session_marks.

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
    """Create the three tables and their indexes (see agentrt.sessions.storage.models)."""
    op.create_table(
        "sessions",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("hidden", sa.Boolean(), nullable=False),
        sa.Column("parent_session_id", sa.String(128), nullable=False),
        sa.Column("parent_generation", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("metadata_json", sa.Text(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.Column("update_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "session_id", name="pk_sessions"),
    )
    op.create_index(
        "ix_sessions_tenant_hidden_update_time_us_session_id",
        "sessions",
        ["tenant", "hidden", "update_time_us", "session_id"],
    )
    op.create_index("ix_sessions_tenant_parent_session_id", "sessions", ["tenant", "parent_session_id"])
    op.create_table(
        "session_entries",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("entry_id", sa.String(128), nullable=False),
        sa.Column("parent_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("item", sa.LargeBinary(), nullable=True),
        sa.Column("item_type", sa.String(16), nullable=False),
        sa.Column("call_id", sa.String(256), nullable=False),
        sa.Column("tool_name", sa.String(256), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=True),
        sa.Column("display_json", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("response_id", sa.String(256), nullable=False),
        sa.Column("usage_json", sa.Text(), nullable=True),
        sa.Column("nested_usage_json", sa.Text(), nullable=True),
        sa.Column("target_entry_id", sa.String(128), nullable=False),
        sa.Column("target_call_id", sa.String(256), nullable=False),
        sa.Column("folded_ids_json", sa.Text(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("leaf_entry_id", sa.String(128), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "session_id", "generation", "seq", name="pk_session_entries"),
    )
    op.create_index(
        "ix_session_entries_tenant_session_id_generation_entry_id",
        "session_entries",
        ["tenant", "session_id", "generation", "entry_id"],
        unique=True,
    )
    op.create_index(
        "ix_session_entries_tenant_session_id_generation_response_id",
        "session_entries",
        ["tenant", "session_id", "generation", "response_id"],
    )
    op.create_table(
        "session_marks",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "session_id", name="pk_session_marks"),
    )


def downgrade() -> None:
    """Drop the tables (and every session with them)."""
    op.drop_table("session_marks")
    op.drop_index("ix_session_entries_tenant_session_id_generation_response_id", table_name="session_entries")
    op.drop_index("ix_session_entries_tenant_session_id_generation_entry_id", table_name="session_entries")
    op.drop_table("session_entries")
    op.drop_index("ix_sessions_tenant_parent_session_id", table_name="sessions")
    op.drop_index("ix_sessions_tenant_hidden_update_time_us_session_id", table_name="sessions")
    op.drop_table("sessions")
