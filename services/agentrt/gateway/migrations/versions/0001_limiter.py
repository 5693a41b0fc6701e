"""The shared limiter's tables: gateway_limiter_budgets and gateway_limiter_entries.

Revision ID: 0001_limiter
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_limiter"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the two tables (see agentrt.gateway.limiter.postgres)."""
    op.create_table(
        "gateway_limiter_budgets",
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("budget_tokens", sa.BigInteger(), nullable=False),
        sa.Column("backoff_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("bucket"),
    )
    op.create_table(
        "gateway_limiter_entries",
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("entry_id", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("settled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", "entry_id"),
    )
    op.create_index("ix_gateway_limiter_entries_bucket_at", "gateway_limiter_entries", ["bucket", "at"])


def downgrade() -> None:
    """Drop the two tables."""
    op.drop_index("ix_gateway_limiter_entries_bucket_at", table_name="gateway_limiter_entries")
    op.drop_table("gateway_limiter_entries")
    op.drop_table("gateway_limiter_budgets")
