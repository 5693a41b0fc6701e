"""ContextCache: when the run loop's copy of the context view is extended, and when it is dropped."""

from __future__ import annotations

import asyncio

from agentrt.runs.loop.context_cache import ContextCache, TailReadAhead
from agentrt.v1 import session_service_pb2 as spb


def entry(seq: int, parent: str, kind: str = "item") -> spb.Entry:
    return spb.Entry(entry_id=f"e{seq}", seq=seq, parent_id=parent, kind=kind)


def loaded() -> ContextCache:
    cache = ContextCache()
    cache.reset([entry(1, ""), entry(2, "e1")], 2, "e2")
    return cache


def test_an_empty_cache_needs_a_full_read():
    cache = ContextCache()
    assert not cache.loaded
    assert not cache.extend([entry(1, "")], 1)


def test_a_linked_contiguous_tail_extends_the_view():
    cache = loaded()
    assert cache.extend([entry(3, "e2"), entry(4, "e3")], 4)
    assert [e.seq for e in cache.entries()] == [1, 2, 3, 4] and cache.last_seq == 4
    assert cache.extend([], 4)
    assert cache.extend([entry(5, "e4")])  # an append's own response: no reported last seq


def test_unprojected_kinds_move_the_leaf_but_stay_out_of_the_view():
    cache = loaded()
    assert cache.extend([entry(3, "e2", "annotation"), entry(4, "e3")], 4)
    assert [e.seq for e in cache.entries()] == [1, 2, 4]


def test_what_could_change_the_view_drops_the_copy():
    cases = {
        "gap": ([entry(4, "e2")], 4),
        "other branch": ([entry(3, "e1")], 3),
        "leaf move": ([entry(3, "e2", "leaf")], 3),
        "update": ([entry(3, "e2", "update")], 3),
        "compaction": ([entry(3, "e2", "compaction")], 3),
        "page cut short": ([entry(3, "e2")], 9),
        "log moved backwards": ([], 1),
    }
    for name, (tail, last_seq) in cases.items():
        cache = loaded()
        assert not cache.extend(tail, last_seq), name
        assert not cache.loaded and cache.entries() == [], name


def test_a_dropped_extension_changes_nothing_it_had_not_checked():
    cache = loaded()
    assert not cache.extend([entry(3, "e2"), entry(5, "e3")], 5)
    cache.reset([entry(1, "")], 1, "e1")
    assert [e.seq for e in cache.entries()] == [1]


def test_the_version_moves_with_every_change_of_the_copy_and_only_then():
    # A tail read begun at one version is applied only while the version holds
    # (runs/loop/core.py's read-ahead): every change of the copy must move it.
    cache = ContextCache()
    seen = [cache.version]
    cache.reset([entry(1, "")], 1, "e1")
    seen.append(cache.version)
    assert cache.extend([], 1)  # nothing new: the same copy, the same version
    assert cache.version == seen[-1]
    assert cache.extend([entry(2, "e1")], 2)
    seen.append(cache.version)
    assert not cache.extend([entry(4, "e2")], 4)  # a seq gap drops the copy
    seen.append(cache.version)
    cache.reset([entry(1, "")], 1, "e1")  # the same content read again is a new copy
    seen.append(cache.version)
    cache.drop()
    seen.append(cache.version)
    assert len(set(seen)) == len(seen)


# -- TailReadAhead: a tail read begun early is used only for the copy it was begun for ------


class _Reads:
    """A tail read whose answers the test releases (no clock, no sleeps)."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.cancelled = 0
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self, after_seq: int) -> tuple[list[spb.Entry], int]:
        self.asked.append(after_seq)
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail is not None:
            raise self.fail
        return [entry(after_seq + 1, f"e{after_seq}")], after_seq + 1


async def test_a_read_begun_for_the_copy_is_handed_over_once():
    cache, reads, ahead = loaded(), _Reads(), TailReadAhead()
    ahead.begin(cache, reads)
    reads.gate.set()
    tail, last = await ahead.take(cache)
    assert reads.asked == [2] and [e.seq for e in tail] == [3] and last == 3
    assert await ahead.take(cache) is None  # taken: the next turn reads for itself


async def test_a_copy_that_changed_since_gets_nothing_and_the_read_is_cancelled():
    cache, reads, ahead = loaded(), _Reads(), TailReadAhead()
    ahead.begin(cache, reads)
    await asyncio.sleep(0)  # let the read start
    assert cache.extend([entry(3, "e2")], 3)  # e.g. a compaction's own write
    assert await ahead.take(cache) is None
    await asyncio.sleep(0)
    assert reads.cancelled == 1


async def test_a_failed_read_is_not_handed_over_and_an_empty_copy_starts_none():
    cache, reads, ahead = loaded(), _Reads(), TailReadAhead()
    reads.fail = RuntimeError("sessions down")
    ahead.begin(cache, reads)
    reads.gate.set()
    assert await ahead.take(cache) is None  # the caller reads again and meets the error there
    empty = ContextCache()
    ahead.begin(empty, reads)
    assert await ahead.take(empty) is None and reads.asked == [2]


async def test_a_cancelled_caller_cancels_the_read_and_stays_cancelled():
    cache, reads, ahead = loaded(), _Reads(), TailReadAhead()
    ahead.begin(cache, reads)
    taker = asyncio.ensure_future(ahead.take(cache))
    await asyncio.sleep(0)
    taker.cancel()
    try:
        await taker
    except asyncio.CancelledError:
        pass
    else:  # pragma: no cover - take swallowed the caller's cancellation
        raise AssertionError("take() swallowed its caller's cancellation")
    await asyncio.sleep(0)
    assert reads.cancelled == 1
