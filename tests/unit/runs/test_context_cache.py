"""ContextCache: when the run loop's copy of the context view is extended, and when it is dropped."""

from __future__ import annotations

from agentrt.runs.loop.context_cache import ContextCache
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
