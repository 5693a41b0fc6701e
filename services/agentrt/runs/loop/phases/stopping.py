"""Stopping early and the error handlers in the run loop (004 §2.3c, §2.7d, §2.10, §2.11b).

The pure rules are `core/stopping.py`; this module reads them off a run:

- `handlers_of`: the entry agent's ErrorHandlers as core handlers (run-level: a handoff
  target's are not consulted).
- `budget`: before a model call, the turn budget (`on_turn_budget`): within it the turn
  goes on; past it `final_turn_without_tools` buys one tool-free closing call (its turn
  number is kept in the run's state as `closing_turn`, so a takeover makes the same call
  once); then the max_turns handler: a fallback output, or the failure `max_turns`.
- StopAfterTurn: queued with the run's input (convert/run.py STOP_KIND) and honored by the
  save point of a turn that would continue (`TurnSteps._save_turn(stoppable=True)`),
  which records the output in the state (`STOPPED_OUTPUT`); the loop then finishes with
  it, also after a takeover (004 §2.3c).
- `terminate_output`: after a tool batch, the final output when every call of the batch
  asks to stop (a client result's `terminate`, or an OK result of a tool whose AgentTool
  sets `terminates_run`), else None.

A fallback or a derived output finishes through the same path as a model's answer (the
loop's finish: run row, events); it is not a model message, so the session keeps only what
the model said.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrt.core import stopping
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: State key: the turn number of the tool-free closing call, once decided.
CLOSING_TURN = "closing_turn"
#: State key: a StopAfterTurn was honored at a save point; the run's final output.
STOPPED_OUTPUT = "stopped_output"


def _handler(h: pb.ErrorHandler) -> stopping.Handler:
    if h.action == pb.ERROR_HANDLER_ACTION_FALLBACK:
        return stopping.Handler(stopping.HandlerAction.FALLBACK, h.fallback_message)
    return stopping.Handler()


def handlers_of(entry: pb.AgentSpec) -> stopping.Handlers:
    """Return the run's error handlers (the entry agent's; unset = fail)."""
    eh = entry.error_handlers
    return stopping.Handlers(_handler(eh.max_turns), _handler(eh.refusal), _handler(eh.invalid_final_output))


def budget(
    turn: int, max_turns: int, entry: pb.AgentSpec, state: dict[str, object]
) -> stopping.BudgetOutcome:
    """Return the budget's decision for the model call of `turn` (see the module docstring).

    A turn already recorded as the closing call is that call again (CLOSING_CALL), so a
    replayed or taken-over closing turn is shaped the same way.
    """
    closing = state.get(CLOSING_TURN)
    if closing == turn:
        return stopping.BudgetOutcome(stopping.BudgetKind.CLOSING_CALL)
    return stopping.on_turn_budget(
        turn,
        max_turns,
        final_turn_without_tools=entry.final_turn_without_tools,
        closing_used=closing is not None,
        handler=handlers_of(entry).max_turns,
    )


def terminate_output(results: Sequence[cpb.ToolResult], terminating_tools: set[str]) -> str | None:
    """Return the final output when every result of the batch asks to stop, else None (004 §2.7b).

    Args:
        results: the batch's results in call order (runtime-answered ones included).
        terminating_tools: names of the current agent's tools with `terminates_run`.
    """
    batch = [
        stopping.BatchResult(
            r.content,
            r.terminate or (r.name in terminating_tools and r.status == cpb.TOOL_RESULT_STATUS_OK),
        )
        for r in results
    ]
    return stopping.terminate_output(batch)


def terminating_tools(snap: pb.AgentSpec) -> set[str]:
    """Return the names of the snapshot's tools that stop the run when every call asks."""
    return {t.name for t in snap.tools if t.terminates_run}
