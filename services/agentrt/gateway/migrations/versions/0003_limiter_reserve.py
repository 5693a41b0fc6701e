"""The limiter's reservation as one server-side function: gateway_limiter_reserve.

A reservation attempt used to be a client-driven transaction (lock the bucket's row,
prune-sum-insert, maybe the wait query, COMMIT): four round trips with the bucket's row
lock held, so on a loaded machine every attempt on the bucket queued behind a holder
that was waiting for CPU to send its next statement. The function does the same steps
server-side; called outside a transaction (agentrt.mesh.storage.db.Database.autocommit), the lock
is held only while the function runs. Each statement of a VOLATILE PL/pgSQL function
takes a new snapshot in READ COMMITTED, so the sums after the lock see every entry
committed before it was granted (as the separate statement did before).

An entry already there (an earlier attempt of the same reservation committed, and its
answer was lost to a timeout) is answered as admitted, so a reservation retried with its
entry id is counted once.

Revision ID: 0003_limiter_reserve
Revises: 0002_call_journal
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0003_limiter_reserve"
down_revision = "0002_call_journal"
branch_labels = None
depends_on = None

RESERVE = """
CREATE OR REPLACE FUNCTION gateway_limiter_reserve(
  p_bucket text, p_id text, p_tokens bigint, p_initial bigint, p_span double precision
) RETURNS TABLE (budget bigint, used bigint, pending bigint, admitted boolean, wait_s double precision)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_budget bigint;
  v_used bigint;
  v_pending bigint;
  v_now timestamptz;
  v_span interval := make_interval(secs => p_span);
  v_excess bigint;
  v_wait double precision;
BEGIN
  SELECT g.budget_tokens INTO v_budget FROM gateway_limiter_budgets g
    WHERE g.bucket = p_bucket FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO gateway_limiter_budgets (bucket, budget_tokens, updated_at)
      VALUES (p_bucket, p_initial, clock_timestamp()) ON CONFLICT (bucket) DO NOTHING;
    SELECT g.budget_tokens INTO v_budget FROM gateway_limiter_budgets g
      WHERE g.bucket = p_bucket FOR UPDATE;
  END IF;
  v_now := clock_timestamp();
  DELETE FROM gateway_limiter_entries e WHERE e.bucket = p_bucket AND e.at <= v_now - v_span;
  SELECT coalesce(sum(e.tokens), 0)::bigint,
         coalesce(sum(e.tokens) FILTER (WHERE NOT e.settled), 0)::bigint
    INTO v_used, v_pending
    FROM gateway_limiter_entries e
    WHERE e.bucket = p_bucket AND e.at > v_now - v_span AND e.entry_id <> p_id;
  IF EXISTS (SELECT 1 FROM gateway_limiter_entries e WHERE e.bucket = p_bucket AND e.entry_id = p_id) THEN
    RETURN QUERY SELECT v_budget, v_used, v_pending, true, 0.0::float8;
    RETURN;
  END IF;
  IF v_used + p_tokens <= v_budget THEN
    INSERT INTO gateway_limiter_entries (bucket, entry_id, at, tokens, settled)
      VALUES (p_bucket, p_id, v_now, p_tokens, false);
    RETURN QUERY SELECT v_budget, v_used, v_pending, true, 0.0::float8;
    RETURN;
  END IF;
  v_wait := 0.0;
  v_excess := v_used - v_pending + p_tokens - v_budget;
  IF p_tokens <= v_budget AND v_excess > 0 THEN
    SELECT extract(epoch FROM s.at + v_span - v_now)::float8 INTO v_wait FROM (
      SELECT e.at, sum(e.tokens) OVER (ORDER BY e.at, e.entry_id) AS freed
      FROM gateway_limiter_entries e
      WHERE e.bucket = p_bucket AND e.settled AND e.at > v_now - v_span
    ) s WHERE s.freed >= v_excess ORDER BY s.at LIMIT 1;
    IF NOT FOUND THEN
      v_wait := p_span;
    END IF;
    v_wait := greatest(0.0, v_wait);
  END IF;
  RETURN QUERY SELECT v_budget, v_used, v_pending, false, v_wait;
END
$fn$
"""


def upgrade() -> None:
    """Create gateway_limiter_reserve (PostgreSQL only; the other backends keep no SQL)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(RESERVE)


def downgrade() -> None:
    """Drop gateway_limiter_reserve."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "DROP FUNCTION IF EXISTS gateway_limiter_reserve(text, text, bigint, bigint, double precision)"
    )
