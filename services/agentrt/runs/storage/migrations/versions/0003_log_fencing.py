"""The lease a run-log entry was written under: its fencing token and owner.

Every run-log row records the run's fencing token and lease owner at the moment it was
written, in the same transaction as the fenced run-row update (a stale holder's write is
refused, so it writes no log row). From the log alone one can then check that no lease was
held by two replicas at once: along a run's log the tokens never decrease, and one token
always names one owner. Rows written before this revision read token 0, owner "".

Revision ID: 0003_log_fencing
Revises: 0002_durability
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_log_fencing"
down_revision = "0002_durability"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add run_log.fencing_token and run_log.lease_owner."""
    with op.batch_alter_table("run_log") as batch:
        batch.add_column(sa.Column("fencing_token", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("lease_owner", sa.String(128), nullable=False, server_default=""))


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("run_log") as batch:
        batch.drop_column("lease_owner")
        batch.drop_column("fencing_token")
