"""Durable event seqs, the time-budget deadline, run state, one unfinished run per session.

- `event_seq_reserved` / `session_seq_reserved`: the highest run and session seq an
  executor may have delivered (provisional events go out before their save point); a
  replica that takes over numbers after them (004 §2.11).
- `deadline_s`: when the run's time budget ends (0 = none), so a suspended run is failed
  on time too.
- `state_json`: small run state that is read with the row (overflow retries, attempts of
  reconciled calls, the suspension reason, diagnostics).
- `uq_runs_unfinished_session`: at most one RUNNING (1) or SUSPENDED (2) run per session,
  so the busy check and the insert are one step on every backend. A database that already
  holds several unfinished runs of one session (the race this index closes) keeps the
  newest of them; the others are failed first (status FAILED, phase FAILED, lease given up),
  since the index could not be created over them and they were interleaving one log.

Revision ID: 0002_durability
Revises: 0001_initial
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_durability"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

_UNFINISHED = sa.text("status IN (1, 2)")


def upgrade() -> None:
    """Add the columns and the partial unique index."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("event_seq_reserved", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("session_seq_reserved", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("deadline_s", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("state_json", sa.Text(), nullable=False, server_default="{}"))
    _fail_duplicates()
    op.create_index(
        "uq_runs_unfinished_session",
        "runs",
        ["tenant", "session_id"],
        unique=True,
        postgresql_where=_UNFINISHED,
        sqlite_where=_UNFINISHED,
    )
    op.create_index("ix_runs_status_deadline", "runs", ["status", "deadline_s"])


def _fail_duplicates() -> None:
    """Fail all but the newest unfinished run of each session (see the module docstring)."""
    conn = op.get_bind()
    rows = conn.execute(
        sa.text("SELECT run_id, tenant, session_id FROM runs WHERE status IN (1, 2) ORDER BY run_id DESC")
    ).all()
    seen: set[tuple[str, str]] = set()
    for run_id, tenant, session_id in rows:
        if (tenant, session_id) in seen:
            conn.execute(
                sa.text(
                    "UPDATE runs SET status = 4, phase = 6, lease_owner = '', lease_expires_s = 0 "
                    "WHERE run_id = :run_id"
                ),
                {"run_id": run_id},
            )
        seen.add((tenant, session_id))


def downgrade() -> None:
    """Drop them."""
    op.drop_index("ix_runs_status_deadline", "runs")
    op.drop_index("uq_runs_unfinished_session", "runs")
    with op.batch_alter_table("runs") as batch:
        for name in ("state_json", "deadline_s", "session_seq_reserved", "event_seq_reserved"):
            batch.drop_column(name)
