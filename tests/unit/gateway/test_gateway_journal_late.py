"""journal/late.py: an answer the journal could not record is kept, recorded later, and bounded."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentrt.gateway.journal import late
from agentrt.gateway.journal.late import LateRecords
from agentrt.gateway.journal.store import MemoryJournalStore, State


async def test_a_kept_answer_is_recorded_in_the_background_then_no_longer_held(monkeypatch):
    monkeypatch.setattr(late, "FIRST_RETRY_S", 0.01)
    store = MemoryJournalStore()
    now = time.time()
    await store.claim("t", "k", "fp", "me", now, now + 10)
    tasks: set[asyncio.Task[None]] = set()
    records = LateRecords(store, "me", 10.0, time.time, tasks)
    records.keep(("t", "k"), "fp", b"answer")
    assert records.held(("t", "k"), "fp") == b"answer"
    assert records.held(("t", "k"), "another request") is None
    assert ("t", "k") in records and ("t", "other") not in records
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    row, _ = await store.claim("t", "k", "fp", "other", now, now + 10)
    assert (row.state, row.response) == (State.DONE, b"answer")
    assert records.held(("t", "k"), "fp") is None and len(records) == 0 and ("t", "k") not in records


async def test_the_oldest_kept_answer_is_dropped_beyond_the_bound(monkeypatch):
    monkeypatch.setattr(late, "MAX_KEPT", 2)
    monkeypatch.setattr(late, "FIRST_RETRY_S", 60.0)  # nothing is recorded during the test
    tasks: set[asyncio.Task[None]] = set()
    records = LateRecords(MemoryJournalStore(), "me", 10.0, time.time, tasks)
    for i in range(3):
        records.keep(("t", f"k{i}"), "fp", f"a{i}".encode())
    assert len(records) == 2
    assert records.held(("t", "k0"), "fp") is None
    assert records.held(("t", "k2"), "fp") == b"a2"
    await asyncio.sleep(0)
    assert sum(1 for t in tasks if not t.done()) == 2  # the dropped one's task was stopped
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("second", [b"answer", b"another"])
async def test_a_second_keep_of_a_key_changes_nothing(second, monkeypatch):
    monkeypatch.setattr(late, "FIRST_RETRY_S", 60.0)
    tasks: set[asyncio.Task[None]] = set()
    records = LateRecords(MemoryJournalStore(), "me", 10.0, time.time, tasks)
    records.keep(("t", "k"), "fp", b"answer")
    records.keep(("t", "k"), "fp", second)
    assert records.held(("t", "k"), "fp") == b"answer" and len(tasks) == 1
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
