"""The save point and the insert of a run as server-side functions: runs_save, runs_insert.

A save point on PostgreSQL was a client-driven transaction: BEGIN, the fenced UPDATE ...
RETURNING, the run log's max(seq), the log's INSERT, the events' INSERT, pg_notify, COMMIT,
each a round trip with the run's row locked, and each statement a pass through SQLAlchemy's
execution machinery in the runs process. `runs_save` does the same steps on the server;
called outside a transaction (agentrt.mesh.storage.db.Database.autocommit, as the gateway's
limiter does, decision 0021) a save point is one round trip and one statement, its own
transaction: all of it commits, or none of it (decision 0026).

- `runs_save(run, token, statuses, changes, kinds, payloads, time, seqs, session_seqs,
  events, tenant, session_id, replica) -> boolean`: the UPDATE of the columns named in
  `changes` (a JSON object, column -> value; bytea as hex text after a backslash-x), guarded by the token
  (NULL: no fence) and the statuses (NULL: any); false when a guard fails (nothing
  written). Then the log entries (kinds[i], payloads[i]) after the log's highest seq, under
  the lease the updated row holds, and the events already numbered (seqs, session_seqs,
  serialized RunEvents), and one NOTIFY on agentrt_run_events when there are events.
  Each statement of a VOLATILE function takes a new snapshot in READ COMMITTED, so the
  max(seq) read after the UPDATE's row lock sees every entry committed before it, as the
  client's separate statement did.
- `runs_insert(row, started, time, events, replica) -> integer`: insert the run row (a JSON
  object of every column), its "started" entry (seq 1), its first events as run seqs
  1..n after the session's head (stored and reserved), and the NOTIFY; returns that head.
  A unique violation (the idempotency key, the session's unfinished run) raises, as the
  INSERT did.

The columns are those of the runs table at this revision: a migration that adds a column
replaces both functions.

Revision ID: 0004_save_functions
Revises: 0003_log_fencing
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0004_save_functions"
down_revision = "0003_log_fencing"
branch_labels = None
depends_on = None

#: The runs table's columns at this revision, in table order (run_id first).
COLUMNS = (
    "run_id", "tenant", "session_id", "agent_name", "agent_version", "agent", "input", "workspace",
    "labels_json", "idempotency_key", "status", "phase", "turns", "usage", "final_output", "failure",
    "pending", "answers", "always_approved_json", "pending_input_json", "session_last_seq",
    "consecutive_error_turns", "tool_calls", "cancel_requested", "cancel_reason", "lease_owner",
    "lease_expires_s", "fencing_token", "create_time_s", "update_time_s", "event_seq_reserved",
    "session_seq_reserved", "deadline_s", "state_json",
)  # fmt: skip

_SETS = ",\n    ".join(f"{c} = CASE WHEN v_changes ? '{c}' THEN v.{c} ELSE r.{c} END" for c in COLUMNS[1:])

SAVE = f"""
CREATE OR REPLACE FUNCTION runs_save(
  p_run text, p_token integer, p_status integer[], p_changes text,
  p_kinds text[], p_payloads text[], p_time double precision,
  p_seqs integer[], p_sseqs integer[], p_events bytea[],
  p_tenant text, p_session text, p_replica text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_changes jsonb := p_changes::jsonb;
  v runs := jsonb_populate_record(NULL::runs, v_changes);
  v_token integer;
  v_owner text;
  v_last integer;
BEGIN
  UPDATE runs r SET
    {_SETS}
  WHERE r.run_id = p_run
    AND (p_token IS NULL OR r.fencing_token = p_token)
    AND (p_status IS NULL OR r.status = ANY (p_status))
  RETURNING r.fencing_token, r.lease_owner INTO v_token, v_owner;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF cardinality(p_kinds) > 0 THEN
    SELECT coalesce(max(l.seq), 0) INTO v_last FROM run_log l WHERE l.run_id = p_run;
    INSERT INTO run_log (run_id, seq, kind, payload, time_s, fencing_token, lease_owner)
      SELECT p_run, v_last + t.n, t.kind, t.payload, p_time, v_token, v_owner
      FROM unnest(p_kinds, p_payloads) WITH ORDINALITY AS t(kind, payload, n);
  END IF;
  IF cardinality(p_events) > 0 THEN
    INSERT INTO run_events (run_id, seq, tenant, session_id, session_seq, event)
      SELECT p_run, t.seq, p_tenant, p_session, t.sseq, t.ev
      FROM unnest(p_seqs, p_sseqs, p_events) AS t(seq, sseq, ev);
    PERFORM pg_notify('agentrt_run_events', json_build_object(
      'replica', p_replica, 'run_id', p_run, 'tenant', p_tenant, 'session_id', p_session,
      'seq', (SELECT max(s) FROM unnest(p_seqs) AS s))::text);
  END IF;
  RETURN true;
END
$fn$
"""

INSERT = """
CREATE OR REPLACE FUNCTION runs_insert(
  p_row text, p_started text, p_time double precision, p_events bytea[], p_replica text
) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v runs := jsonb_populate_record(NULL::runs, p_row::jsonb);
  v_run integer;
  v_stored integer;
  v_reserved integer;
  v_session integer := 0;
BEGIN
  INSERT INTO runs SELECT (v).*;
  INSERT INTO run_log (run_id, seq, kind, payload, time_s, fencing_token, lease_owner)
    VALUES (v.run_id, 1, 'started', p_started, p_time, v.fencing_token, v.lease_owner);
  IF cardinality(p_events) > 0 THEN
    SELECT greatest(coalesce(max(e.seq), 0), v.event_seq_reserved) INTO v_run
      FROM run_events e WHERE e.run_id = v.run_id;
    IF v_run <> 0 THEN
      RAISE EXCEPTION 'runs_insert: run % already has event seq %', v.run_id, v_run;
    END IF;
    SELECT coalesce(max(e.session_seq), 0) INTO v_stored
      FROM run_events e WHERE e.tenant = v.tenant AND e.session_id = v.session_id;
    SELECT coalesce(max(r.session_seq_reserved), 0) INTO v_reserved
      FROM runs r WHERE r.tenant = v.tenant AND r.session_id = v.session_id;
    v_session := greatest(v_stored, v_reserved);
    INSERT INTO run_events (run_id, seq, tenant, session_id, session_seq, event)
      SELECT v.run_id, t.n, v.tenant, v.session_id, v_session + t.n, t.ev
      FROM unnest(p_events) WITH ORDINALITY AS t(ev, n);
    PERFORM pg_notify('agentrt_run_events', json_build_object(
      'replica', p_replica, 'run_id', v.run_id, 'tenant', v.tenant, 'session_id', v.session_id,
      'seq', cardinality(p_events))::text);
  END IF;
  RETURN v_session;
END
$fn$
"""


def upgrade() -> None:
    """Create runs_save and runs_insert (PostgreSQL only; SQLite keeps no SQL)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(SAVE)
    op.execute(INSERT)


def downgrade() -> None:
    """Drop them."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "DROP FUNCTION IF EXISTS runs_save(text, integer, integer[], text, text[], text[], "
        "double precision, integer[], integer[], bytea[], text, text, text)"
    )
    op.execute("DROP FUNCTION IF EXISTS runs_insert(text, text, double precision, bytea[], text)")
