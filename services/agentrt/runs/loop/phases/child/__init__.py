"""Agents as tools in the run loop: a call starts a child run (004 §2.8, §2.2 step 6, §2.7f; 002 run tree).

An AgentTool naming a registered agent is offered as `{"input": string}` (runs/spec/agents.py);
the pure rules are `core/agent_tools.py`. This package is the executor's half: calls.py
(`start`, `ChildCalls`, `suspend`) and records.py (the state keys, `child_key`, a child's
result and pending calls as its parent shows them, `fold`); the names below are re-exported
here.

- `start(ex, planned)`, once the tool phase logged `tools_started`: every agent-tool call that
  runs gets its child run, found or created. A child is a real run (own run id, own hidden
  session serving the parent's, the child agent's spec resolved fresh from the registry, the
  parent's workspace) whose row carries the idempotency key `child_key(parent, call)`: a
  control character no client key may hold, so a resume or takeover that starts the batch
  again finds the same child rather than starting another. New links are one fenced save of
  the parent (`children_linked` in its log, the child's id appended to its `child_run_ids`
  state, a durable `child_run_linked` event); a new child is spawned (the manager's
  `ChildHost`, so its lease is renewed like every run's) when its call runs in the batch,
  inside the call's span, so the child's spans join the parent's trace under it.
- `ChildCalls.run`, inside the batch (runs/loop/phases/batch.py): waits for the child's end or its
  suspension, following its events (live from the hub, polling storage for other replicas);
  its tool activity reaches the parent's stream as `tool_progressed` of the call. A finished
  child is the call's result (`agent_tools.child_result`; a failed or canceled child is an
  error result, never a failed parent) with `child_run_id` and the child's total usage as
  `nested_usage`. A kill of the batch (cancel, time budget) cancels the child; an abandon
  (shutdown, lease lost) lets it run on.
- A suspended child suspends the parent too (004 §2.2 step 6): the parent's pending calls are
  the child's, each with `run_id` (the run that waits) and `parent_call_id` (the parent's
  call); `child_pending` in the parent's state maps each child to the call ids it shows.
  Completed siblings keep their results through the tool service's journal; the child's
  call is withheld (no tool_returned). runs/lifecycle/child_runs.py routes the answers and wakes the
  parent; its batch then starts again and finds the child running or finished.
- `fold`: the results' nested usage joins the run's total and its nested part
  (`RunUsage.add_nested`), written with `tools_finished`, so it is counted exactly once.

Everything lives in the run log and rows (no state in memory outlives a wait), so a kill -9
between the pause and the approval loses nothing.
"""

from agentrt.runs.loop.phases.child.calls import MAX_CHILD_DEPTH, ChildCalls, ChildHost, start, suspend
from agentrt.runs.loop.phases.child.records import (
    CHILD_DEPTH,
    CHILD_PENDING,
    CHILD_RUN_IDS,
    NESTED,
    PARENT_CALL_ID,
    PARENT_RUN_ID,
    annotated,
    child_key,
    finished_result,
    fold,
)

__all__ = [
    "CHILD_DEPTH",
    "CHILD_PENDING",
    "CHILD_RUN_IDS",
    "MAX_CHILD_DEPTH",
    "NESTED",
    "PARENT_CALL_ID",
    "PARENT_RUN_ID",
    "ChildCalls",
    "ChildHost",
    "annotated",
    "child_key",
    "finished_result",
    "fold",
    "start",
    "suspend",
]
