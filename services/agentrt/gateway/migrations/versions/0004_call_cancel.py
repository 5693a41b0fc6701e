"""The journal row's cancel request: CancelGenerate reaching a call another replica holds.

`gateway_model_calls.cancel_requested` (boolean, false): set by the replica a CancelGenerate
reached when it does not run the call itself; the holder's lease renewal reads it and
cancels its provider call (journal/calls.py).

Revision ID: 0004_call_cancel
Revises: 0003_limiter_reserve
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_call_cancel"
down_revision = "0003_limiter_reserve"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column (existing rows: no cancel requested)."""
    op.add_column(
        "gateway_model_calls",
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("gateway_model_calls") as batch:
        batch.drop_column("cancel_requested")
