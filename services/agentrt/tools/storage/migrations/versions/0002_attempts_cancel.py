"""Re-run attempts share the journal column; a cancel can be asked of another process.

- `call_id` grows to 160 characters: a re-run of a call ordered by a reconciliation is
  journaled as "<call_id>#<attempt>" (attempt 0 keeps the bare call id).
- `cancel_requested`: CancelExecution sets it when the call runs in another process, which
  kills the call at its next heartbeat.

Revision ID: 0002_attempts_cancel
Revises: 0001_initial
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_attempts_cancel"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Widen call_id, add cancel_requested."""
    with op.batch_alter_table("tool_executions") as batch:
        batch.alter_column(
            "call_id", existing_type=sa.String(128), type_=sa.String(160), existing_nullable=False
        )
        batch.add_column(
            sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    """Drop cancel_requested, narrow call_id back."""
    with op.batch_alter_table("tool_executions") as batch:
        batch.drop_column("cancel_requested")
        batch.alter_column(
            "call_id", existing_type=sa.String(160), type_=sa.String(128), existing_nullable=False
        )
