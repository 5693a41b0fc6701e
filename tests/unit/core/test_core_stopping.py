"""Stopping early and error handlers (core/stopping.py): unanimity, the save point, the budget."""

from __future__ import annotations

from agentrt.core.stopping import (
    BatchResult,
    BudgetKind,
    Handler,
    HandlerAction,
    Handlers,
    on_refusal,
    on_turn_budget,
    stop_at_save_point,
    stop_output,
    terminate_output,
)

FAIL = Handler()
FALLBACK = Handler(HandlerAction.FALLBACK, "I ran out of steps; here is what I know.")


def test_terminate_needs_every_call_of_the_batch_to_ask():
    both = [BatchResult("saved", True), BatchResult("sent", True)]
    assert terminate_output(both) == "sent"  # the last call's output
    assert terminate_output([BatchResult("saved", True), BatchResult("still working", False)]) is None
    assert terminate_output([BatchResult("A person denied this call", False)]) is None
    assert terminate_output([]) is None


def test_stop_after_turn_is_asked_only_where_the_run_would_go_on():
    assert stop_at_save_point(stop_requested=True, turn_continues=True)
    assert not stop_at_save_point(stop_requested=True, turn_continues=False)  # already ending
    assert not stop_at_save_point(stop_requested=False, turn_continues=True)


def test_a_stopped_runs_output_is_derived_from_the_turn():
    assert stop_output("Here is the summary.", ["ls output"]) == "Here is the summary."
    assert stop_output("  ", ["first", "last"]) == "last"
    assert stop_output("", []) == ""


def test_the_budget_buys_one_tool_free_closing_call_when_asked():
    go = on_turn_budget(3, 3, final_turn_without_tools=True, closing_used=False, handler=FAIL)
    assert go.kind == BudgetKind.CONTINUE
    closing = on_turn_budget(4, 3, final_turn_without_tools=True, closing_used=False, handler=FAIL)
    assert closing.kind == BudgetKind.CLOSING_CALL
    after = on_turn_budget(5, 3, final_turn_without_tools=True, closing_used=True, handler=FAIL)
    assert after.kind == BudgetKind.FAIL
    without = on_turn_budget(4, 3, final_turn_without_tools=False, closing_used=False, handler=FAIL)
    assert without.kind == BudgetKind.FAIL


def test_handlers_turn_a_failure_into_a_fallback_output():
    out = on_turn_budget(4, 3, final_turn_without_tools=False, closing_used=False, handler=FALLBACK)
    assert (out.kind, out.output) == (BudgetKind.FALLBACK, FALLBACK.fallback)
    assert on_refusal(FAIL).kind == BudgetKind.FAIL
    assert on_refusal(Handler(HandlerAction.FALLBACK, "Sorry.")).output == "Sorry."
    assert Handler(HandlerAction.FAIL, "ignored").fallback_output is None
    assert Handlers().invalid_final_output == FAIL
