"""The model-call journal's table: gateway_model_calls (see agentrt.gateway.journal.sql).

Revision ID: 0002_call_journal
Revises: 0001_limiter
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_call_journal"
down_revision = "0001_limiter"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create gateway_model_calls and its retention index."""
    op.create_table(
        "gateway_model_calls",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("call_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("state", sa.SmallInteger(), nullable=False),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("lease_until_s", sa.Float(), nullable=False),
        sa.Column("takeovers", sa.Integer(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=True),
        sa.Column("created_at_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "call_key"),
    )
    op.create_index("ix_gateway_model_calls_created_at_s", "gateway_model_calls", ["created_at_s"])


def downgrade() -> None:
    """Drop gateway_model_calls."""
    op.drop_index("ix_gateway_model_calls_created_at_s", table_name="gateway_model_calls")
    op.drop_table("gateway_model_calls")
