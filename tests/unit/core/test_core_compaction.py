"""Compaction planning (core.compaction; 004 §2.5f, §2.5g; 002 History Policies)."""

from __future__ import annotations

import json

from agentrt.core.compaction import (
    CHECKPOINT,
    EVIDENCE_HEADER,
    STEP,
    USER,
    Unit,
    estimate_tokens,
    evidence,
    plan,
    should_compact,
    step_groups,
    trigger_tokens,
    weight,
)
from agentrt.core.truncate import byte_len


def step(n: int, calls: int = 1, size: int = 100) -> list[Unit]:
    group = f"run/{n}"
    out = [Unit(f"a{n}", STEP, group, size_bytes=size)]
    out += [Unit(f"c{n}.{i}", STEP, group, call_id=f"call{n}.{i}", size_bytes=size) for i in range(calls)]
    out += [
        Unit(f"r{n}.{i}", STEP, group, call_id=f"call{n}.{i}", is_result=True, size_bytes=size)
        for i in range(calls)
    ]
    return out


def test_nothing_to_fold_when_the_view_holds_no_more_than_the_kept_turns():
    units = [Unit("u", USER), *step(1), *step(2)]
    assert plan(units, keep_turns=2) is None
    assert step_groups(units) == 2


def test_a_pass_keeps_the_newest_turns_and_the_task_and_folds_the_rest():
    units = [Unit("u0", USER), *step(1), *step(2), Unit("u1", USER), *step(3), *step(4), *step(5)]
    p = plan(units, keep_turns=2)
    assert p is not None and p.kept_steps == 2 and p.folded_steps == 3
    folded = set(p.folded)
    assert {"a1", "c1.0", "r1.0", "a2", "a3", "r3.0", "u0"} <= folded
    assert "u1" not in folded  # the last user message before the cut stays exact
    assert not folded & {"a4", "c4.0", "r4.0", "a5"}


def test_a_call_is_never_separated_from_its_result():
    """A result written after later steps (a repair) still travels with its call's group."""
    units = [Unit("u", USER), *step(1, calls=2), *step(2), *step(3)]
    late = Unit("late", STEP, "repair/9", call_id="call1.1", is_result=True)
    units = [u for u in units if u.entry_id != "r1.1"] + [late]
    p = plan(units, keep_turns=2)
    assert p is not None and "late" in p.folded and "c1.1" in p.folded
    for folded_call in [u for u in units if u.call_id and u.entry_id in p.folded]:
        partners = [u for u in units if u.call_id == folded_call.call_id]
        assert all(u.entry_id in p.folded for u in partners)


def test_live_checkpoints_are_merged_into_the_new_one():
    units = [Unit("u", USER), *step(1), *step(2), *step(3), Unit("k", CHECKPOINT, size_bytes=50)]
    p = plan(units, keep_turns=1)
    assert p is not None and "k" in p.folded and p.folded_bytes >= 50


def test_triggers_are_ored_and_the_token_threshold_is_exclusive():
    assert trigger_tokens(1000, 0) == 750 and trigger_tokens(1000, 900) == 900 and trigger_tokens(0, 0) == 0
    assert should_compact(751, 750, 1, 0) == (True, "tokens")
    assert should_compact(750, 750, 1, 0) == (False, "")  # exactly at the threshold fits
    assert should_compact(10, 750, 5, 4) == (True, "turns")
    assert should_compact(10, 0, 4, 4) == (False, "")
    assert estimate_tokens(100, 20, 9) == 123


def test_weight_is_the_summed_bytes():
    assert weight([Unit("a", STEP, size_bytes=3), Unit("b", USER, size_bytes=4)]) == 7


def test_evidence_fits_its_budget_and_keeps_the_newest_records():
    records = [{"role": "user", "text": f"message {i} " + "x" * 2000} for i in range(50)]
    text = evidence(records, ["an earlier summary"], budget_bytes=8000)
    assert byte_len(text) <= 8000
    assert "an earlier summary" in text and "message 0" in text and "message 49" in text
    lines = text.splitlines()
    start = lines.index(EVIDENCE_HEADER) + 1
    for line in lines[start:]:
        json.loads(line)  # every record stays a JSON object, its bodies capped
    many = [{"role": "user", "text": f"message {i}"} for i in range(2000)]
    text = evidence(many, [], budget_bytes=4000)
    assert byte_len(text) <= 4000 and "message 1999" in text and "did not fit" in text
