"""A racing input guardrail against the model call (core/input_race.py), as scripted event sequences.

Each test is the order in which things happen in a real race (the loop feeds the events as
its tasks finish); no clock and no tasks are needed to pin what the loop must do.
"""

from __future__ import annotations

from agentrt.core.guardrails import CANCELLED_TEXT, Decision, Result, Stage
from agentrt.core.input_race import Action, Ending, InputRace


def g(name: str, decision: Decision | None, error: str = "", message: str = "") -> Result:
    return Result(name, Stage.INPUT, decision, message, error)


def test_a_tripwire_while_the_call_is_in_flight_cancels_it_unbilled():
    race = InputRace(["moderation", "pii"])
    assert race.guardrail_done(g("pii", Decision.TRIP, message="an SSN")) == Action.CANCEL_MODEL
    assert race.outcome is not None
    assert (race.outcome.ending, race.outcome.model_billed) == (Ending.TRIPPED, False)
    assert race.outcome.ended_by is not None and race.outcome.ended_by.guardrail == "pii"
    assert [r.guardrail for r in race.outcome.cancelled] == ["moderation"]
    # the cancelled call's failure and the other guardrail's cancellation are echoes: ignored
    assert race.model_failed() == Action.IGNORE
    assert race.guardrail_done(g("moderation", None, error=CANCELLED_TEXT)) == Action.IGNORE
    assert race.outcome.ending == Ending.TRIPPED


def test_a_response_that_returns_first_is_held_until_every_guardrail_allows():
    race = InputRace(["moderation", "pii"])
    assert race.model_done() == Action.WAIT  # nothing is acted on yet
    assert race.guardrail_done(g("moderation", Decision.ALLOW)) == Action.WAIT
    assert race.guardrail_done(g("pii", Decision.ALLOW)) == Action.PROCEED
    assert race.outcome is not None and race.outcome.model_billed and race.outcome.replacement is None


def test_a_tripwire_after_the_response_discards_it_but_it_was_billed():
    race = InputRace(["moderation"])
    assert race.model_done() == Action.WAIT
    assert race.guardrail_done(g("moderation", Decision.TRIP)) == Action.DISCARD_RESPONSE
    assert race.outcome is not None and (race.outcome.ending, race.outcome.model_billed) == (
        Ending.TRIPPED,
        True,
    )


def test_guardrails_that_allow_first_wait_for_the_model():
    race = InputRace(["moderation"])
    assert race.guardrail_done(g("moderation", Decision.ALLOW)) == Action.WAIT
    assert race.model_done() == Action.PROCEED


def test_a_model_that_fails_cancels_the_racing_guardrails_and_its_error_is_not_masked():
    race = InputRace(["slow_judge", "pii"])
    assert race.guardrail_done(g("pii", Decision.ALLOW)) == Action.WAIT
    assert race.model_failed() == Action.CANCEL_GUARDRAILS
    assert race.outcome is not None and race.outcome.ending == Ending.MODEL_FAILED
    assert [r.guardrail for r in race.outcome.cancelled] == ["slow_judge"]
    # the judge's own cancellation error arrives afterwards: it must not replace the model's error
    assert race.guardrail_done(g("slow_judge", None, error="cancelled")) == Action.IGNORE
    assert race.outcome.ending == Ending.MODEL_FAILED


def test_a_delivered_verdict_wins_over_a_later_model_failure():
    race = InputRace(["judge"])
    assert race.guardrail_done(g("judge", Decision.TRIP)) == Action.CANCEL_MODEL
    assert race.model_failed() == Action.IGNORE
    assert race.outcome is not None and race.outcome.ending == Ending.TRIPPED


def test_an_erroring_guardrail_ends_the_race_like_a_tripwire():
    race = InputRace(["judge"])
    assert race.guardrail_done(g("judge", None, error="the reply is not JSON")) == Action.CANCEL_MODEL
    assert race.outcome is not None and race.outcome.ended_by is not None
    assert race.outcome.ended_by.failure_kind == "guardrail_failed"


def test_a_racing_replace_applies_from_the_next_turn():
    race = InputRace(["scrub", "pii"])
    race.guardrail_done(g("pii", Decision.ALLOW))
    race.guardrail_done(g("scrub", Decision.REPLACE, message="[scrubbed input]"))
    assert race.model_done() == Action.PROCEED
    assert race.outcome is not None and race.outcome.replacement is not None
    assert race.outcome.replacement.message == "[scrubbed input]"
    assert [r.guardrail for r in race.results] == ["scrub", "pii"]


def test_no_racing_guardrails_proceeds_with_the_response():
    race = InputRace([])
    assert race.model_done() == Action.PROCEED
