"""Progressive tool disclosure (core/disclosure.py): withheld, cumulative, surviving serialization."""

from __future__ import annotations

import pytest

from agentrt.core.disclosure import Disclosure

TOOLS = [("search", False), ("deploy", True), ("rollback", True), ("read_file", False)]
DEFERRED = {name for name, deferred in TOOLS if deferred}


def test_deferred_tools_wait_until_a_result_names_them():
    state = Disclosure()
    assert state.offered(TOOLS) == ["search", "read_file"]
    state, new = state.disclose(["deploy", "teleport", "search"], DEFERRED)
    assert new == ("deploy",)  # unknown and already-offered names are ignored
    assert state.offered(TOOLS) == ["search", "deploy", "read_file"]  # the agent's order


def test_disclosure_is_cumulative_and_repeats_change_nothing():
    state, _ = Disclosure().disclose(["deploy"], DEFERRED)
    same, new = state.disclose(["deploy"], DEFERRED)
    assert same is state and new == ()
    state, new = state.disclose(["rollback"], DEFERRED)
    assert state.names == ("deploy", "rollback") and new == ("rollback",)


def test_a_resumed_or_taken_over_run_offers_the_same_tools():
    # scripted: turn 1 discloses deploy; the process dies; the new owner reads the log
    state, _ = Disclosure().disclose(["deploy"], DEFERRED)
    record = state.to_json()
    restored = Disclosure.from_json(record)
    assert restored == state and restored.offered(TOOLS) == state.offered(TOOLS)
    restored, _ = restored.disclose(["rollback"], DEFERRED)
    assert Disclosure.from_json(restored.to_json()).names == ("deploy", "rollback")
    assert Disclosure.from_json("") == Disclosure()


def test_a_corrupted_record_is_not_read_as_nothing_disclosed():
    for text in ("[]", '{"version": 2, "disclosed": []}', '{"version": 1, "disclosed": [1]}', "{"):
        with pytest.raises(ValueError):
            Disclosure.from_json(text)
