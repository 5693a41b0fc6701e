"""An append as one server-side function on PostgreSQL: sessions_append.

AppendEntries was a client-driven transaction (BEGIN, the claim of the session row, the
log's last entry, the usage check, the seq mint, the insert, COMMIT): seven or more round
trips with the session row's lock held across them. The function does the same steps in
the same order server-side; the store calls it outside a transaction, so the statement is
the transaction and commits when it ends (decision 0025, `sessions/storage/sql_postgres.py`).

Steps, as the Python path runs them on SQLite (`sessions/storage/sql_sqlite.py`):
1. Lock the session row (`FOR UPDATE`): it proves the session exists at the generation
   named and serializes every writer of the session, as the claim did. A delete that
   took the lock first leaves no row: 'no_session'.
2. Read the incarnation's last entry (the append point and the active leaf). Each
   statement of a VOLATILE PL/pgSQL function takes a new snapshot in READ COMMITTED, so
   this sees every entry committed by the writer that held the lock before.
3. The fence: `p_expected` (NULL = none) against the last seq: 'seq_mismatch'.
4. Leaf moves in the batch must name an entry of the incarnation that is no leaf move,
   checked in `p_leaf_targets` order (the caller sorts them): 'entry_not_found',
   'leaf_target'.
5. Usage already recorded for a (run_id, turn, response_id) the batch carries usage for
   (004 §2.7f): 'usage_recorded' with the smallest such key (codepoint order, as Python
   sorts).
6. Mint the seqs from the never-deleted high-water mark (`session_marks`), move the
   session's change record to `p_now` (never backwards), insert the entries with seq =
   base + position; the first entry's parent is the active leaf read in step 2, the
   others' parents come in `p_parent_ids` (the caller links the batch).
A refusal (steps 1-5) changes nothing: the function returns before its first write.
'ok' returns the generation, the seq base and the first entry's parent.

Revision ID: 0002_append_function
Revises: 0001_initial
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0002_append_function"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

APPEND = """
CREATE OR REPLACE FUNCTION sessions_append(
  p_tenant text, p_sid text, p_gen bigint, p_expected bigint, p_now bigint,
  p_leaf_targets text[], p_usage_runs text[], p_usage_turns integer[], p_usage_responses text[],
  p_entry_ids text[], p_parent_ids text[], p_kinds text[], p_items bytea[], p_item_types text[],
  p_call_ids text[], p_tool_names text[], p_payloads text[], p_displays text[], p_run_ids text[],
  p_turns integer[], p_response_ids text[], p_usages text[], p_nested_usages text[],
  p_target_entry_ids text[], p_target_call_ids text[], p_folded_ids text[], p_summaries text[],
  p_leaf_entry_ids text[], p_create_times bigint[]
) RETURNS TABLE (o_outcome text, o_generation bigint, o_value bigint, o_text text, o_turn integer,
                 o_response text)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_gen bigint;
  v_last bigint := 0;
  v_seq bigint;
  v_id text;
  v_kind text;
  v_leaf text;
  v_parent text := '';
  v_target text;
  v_found text;
  v_base bigint;
  v_n integer := cardinality(p_kinds);
BEGIN
  SELECT s.generation INTO v_gen FROM sessions s
    WHERE s.tenant = p_tenant AND s.session_id = p_sid FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'no_session'::text, 0::bigint, 0::bigint, ''::text, 0, ''::text;
    RETURN;
  END IF;
  IF p_gen <> 0 AND p_gen <> v_gen THEN
    RETURN QUERY SELECT 'stale'::text, v_gen, 0::bigint, ''::text, 0, ''::text;
    RETURN;
  END IF;
  SELECT e.seq, e.entry_id, e.kind, e.leaf_entry_id INTO v_seq, v_id, v_kind, v_leaf
    FROM session_entries e
    WHERE e.tenant = p_tenant AND e.session_id = p_sid AND e.generation = v_gen
    ORDER BY e.seq DESC LIMIT 1;
  IF FOUND THEN
    v_last := v_seq;
    v_parent := CASE WHEN v_kind = 'leaf' THEN v_leaf ELSE v_id END;
  END IF;
  IF p_expected IS NOT NULL AND p_expected <> v_last THEN
    RETURN QUERY SELECT 'seq_mismatch'::text, v_gen, v_last, ''::text, 0, ''::text;
    RETURN;
  END IF;
  FOREACH v_target IN ARRAY p_leaf_targets LOOP
    SELECT e.kind INTO v_found FROM session_entries e
      WHERE e.tenant = p_tenant AND e.session_id = p_sid AND e.generation = v_gen
        AND e.entry_id = v_target;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 'entry_not_found'::text, v_gen, 0::bigint, v_target, 0, ''::text;
      RETURN;
    END IF;
    IF v_found = 'leaf' THEN
      RETURN QUERY SELECT 'leaf_target'::text, v_gen, 0::bigint, v_target, 0, ''::text;
      RETURN;
    END IF;
  END LOOP;
  IF cardinality(p_usage_responses) > 0 THEN
    RETURN QUERY
      SELECT 'usage_recorded'::text, v_gen, 0::bigint, e.run_id::text, e.turn, e.response_id::text
      FROM session_entries e
      JOIN unnest(p_usage_runs, p_usage_turns, p_usage_responses) AS w(run_id, turn, response_id)
        ON e.run_id = w.run_id AND e.turn = w.turn AND e.response_id = w.response_id
      WHERE e.tenant = p_tenant AND e.session_id = p_sid AND e.generation = v_gen
        AND e.response_id = ANY(p_usage_responses) AND e.usage_json IS NOT NULL
      ORDER BY e.run_id COLLATE "C", e.turn, e.response_id COLLATE "C"
      LIMIT 1;
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;
  UPDATE session_marks m SET last_seq = m.last_seq + v_n
    WHERE m.tenant = p_tenant AND m.session_id = p_sid
    RETURNING m.last_seq - v_n INTO v_base;
  UPDATE sessions s SET update_time_us = greatest(s.update_time_us, p_now)
    WHERE s.tenant = p_tenant AND s.session_id = p_sid;
  INSERT INTO session_entries (
    tenant, session_id, generation, seq, entry_id, parent_id, kind, item, item_type, call_id,
    tool_name, payload_json, display_json, run_id, turn, response_id, usage_json,
    nested_usage_json, target_entry_id, target_call_id, folded_ids_json, summary,
    leaf_entry_id, create_time_us)
  SELECT p_tenant, p_sid, v_gen, v_base + u.ord, u.entry_id,
         CASE WHEN u.ord = 1 THEN v_parent ELSE u.parent_id END,
         u.kind, u.item, u.item_type, u.call_id, u.tool_name, u.payload, u.display, u.run_id,
         u.turn, u.response_id, u.usage, u.nested_usage, u.target_entry_id, u.target_call_id,
         u.folded_ids, u.summary, u.leaf_entry_id, u.create_time
  FROM unnest(p_entry_ids, p_parent_ids, p_kinds, p_items, p_item_types, p_call_ids,
              p_tool_names, p_payloads, p_displays, p_run_ids, p_turns, p_response_ids,
              p_usages, p_nested_usages, p_target_entry_ids, p_target_call_ids, p_folded_ids,
              p_summaries, p_leaf_entry_ids, p_create_times)
       WITH ORDINALITY AS u(entry_id, parent_id, kind, item, item_type, call_id, tool_name,
                            payload, display, run_id, turn, response_id, usage, nested_usage,
                            target_entry_id, target_call_id, folded_ids, summary,
                            leaf_entry_id, create_time, ord);
  RETURN QUERY SELECT 'ok'::text, v_gen, v_base, v_parent, 0, ''::text;
END
$fn$
"""

_SIGNATURE = (
    "text, text, bigint, bigint, bigint, text[], text[], integer[], text[], text[], text[], "
    "text[], bytea[], text[], text[], text[], text[], text[], text[], integer[], text[], text[], "
    "text[], text[], text[], text[], text[], text[], bigint[]"
)


def upgrade() -> None:
    """Create sessions_append (PostgreSQL only; SQLite runs the same steps in Python)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(APPEND)


def downgrade() -> None:
    """Drop sessions_append."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS sessions_append({_SIGNATURE})")
