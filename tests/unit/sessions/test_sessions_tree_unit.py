"""Pure tree reads: leaf fold, linking, walks, the linkless prefix, update folds, the context
view, dangling calls and paging (004 §2.5b–§2.5d, §2.5h)."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.sessions import tree
from agentrt.sessions.domain import ITEM_TOOL_CALL, ITEM_TOOL_RESULT, Display, Entry


def item(eid: str, seq: int, parent: str = "", **kw) -> Entry:
    return Entry(kind="item", entry_id=eid, seq=seq, parent_id=parent, item=b"", item_type="message", **kw)


def call(eid: str, seq: int, parent: str, call_id: str, name: str = "t") -> Entry:
    return Entry(
        kind="item",
        entry_id=eid,
        seq=seq,
        parent_id=parent,
        item=b"",
        item_type=ITEM_TOOL_CALL,
        call_id=call_id,
        tool_name=name,
    )


def result(eid: str, seq: int, parent: str, call_id: str) -> Entry:
    return Entry(
        kind="item",
        entry_id=eid,
        seq=seq,
        parent_id=parent,
        item=b"",
        item_type=ITEM_TOOL_RESULT,
        call_id=call_id,
    )


def leaf(eid: str, seq: int, target: str, parent: str = "") -> Entry:
    return Entry(kind="leaf", entry_id=eid, seq=seq, parent_id=parent, leaf_entry_id=target)


def ids(entries) -> list[str]:
    return [e.entry_id for e in entries]


def test_leaf_is_a_fold_over_the_last_entry():
    assert tree.current_leaf([]) == ""
    log = [item("a", 1), item("b", 2, "a")]
    assert tree.current_leaf(log) == "b"
    assert tree.current_leaf([*log, leaf("l", 3, "a", "b")]) == "a"


def test_link_assigns_parents_from_the_current_leaf_and_through_leaf_moves():
    batch = [
        Entry(kind="item", entry_id="x"),
        Entry(kind="leaf", entry_id="l", leaf_entry_id="a"),
        Entry(kind="item", entry_id="y"),
    ]
    linked, after = tree.link("b", batch)
    assert [e.parent_id for e in linked] == ["b", "x", "a"]
    assert after == "y"


def test_branch_walks_the_active_leaf_and_ignores_abandoned_attempts():
    log = [item("q", 1), item("a1", 2, "q"), leaf("l", 3, "q", "a1"), item("a2", 4, "q")]
    assert ids(tree.branch(log)) == ["q", "a2"]
    assert ids(tree.branch(log, "a1")) == ["q", "a1"]


def test_a_missing_parent_or_a_cycle_ends_the_walk():
    assert ids(tree.branch([item("a", 1), item("b", 2, "gone"), item("c", 3, "b")])) == ["b", "c"]
    cyclic = [item("a", 1, "b"), item("b", 2, "a")]
    assert sorted(ids(tree.branch(cyclic))) == ["a", "b"]


def test_the_walk_continues_through_the_linkless_prefix():
    legacy = [item("a", 1), item("b", 2), item("c", 3)]
    assert ids(tree.branch(legacy)) == ["a", "b", "c"]
    # The first linked append to a linkless session keeps what came before it.
    assert ids(tree.branch([*legacy, item("d", 4, "c")])) == ["a", "b", "c", "d"]
    # A root outside the prefix does not pull the prefix in.
    log = [*legacy, leaf("l", 4, "b", "c"), item("e", 5, "")]
    assert ids(tree.branch(log)) == ["e"]


def test_context_view_projects_folds_and_excludes():
    log = [
        item("u1", 1),
        Entry(kind="annotation", entry_id="n", seq=2, parent_id="u1"),
        item("a1", 3, "n"),
        Entry(
            kind="compaction",
            entry_id="cp",
            seq=4,
            parent_id="a1",
            folded_entry_ids=("u1", "a1"),
            summary="s",
        ),
        Entry(
            kind="update",
            entry_id="up",
            seq=5,
            parent_id="cp",
            target_entry_id="u2",
            display=Display(title="t"),
        ),
        item("u2", 6, "up"),
        Entry(kind="mystery", entry_id="m", seq=7, parent_id="u2"),
    ]
    assert ids(tree.context_view(log)) == ["cp", "u2"]
    assert ids(tree.context_view(log, include_unprojected=True)) == ["n", "cp", "u2", "m"]
    assert tree.context_view(log)[1].display == Display(title="t")


def test_a_checkpoint_off_the_active_branch_folds_nothing():
    log = [
        item("q", 1),
        item("a", 2, "q"),
        Entry(kind="compaction", entry_id="cp", seq=3, parent_id="a", folded_entry_ids=("q",)),
        leaf("l", 4, "a", "cp"),
    ]
    assert ids(tree.context_view(log)) == ["q", "a"]


def test_update_fold_is_last_write_wins_per_field_and_never_writes_through():
    target = call("c", 1, "", "call-1")
    target = dataclasses.replace(
        target, display=Display(title="t0", summary="s0", extra_json='{"a": 1, "b": 1}')
    )
    updates = [
        Entry(
            kind="update",
            entry_id="u1",
            seq=2,
            target_call_id="call-1",
            display=Display(summary="s1", extra_json='{"b": 2}'),
        ),
        Entry(kind="update", entry_id="u2", seq=3, target_entry_id="c", display=Display(title="t2")),
        Entry(kind="update", entry_id="u3", seq=4, target_entry_id="missing", display=Display(title="x")),
    ]
    log = [target, *updates]
    before = list(log)
    (folded,) = tree.fold_updates([target], log)
    assert folded.display.title == "t2" and folded.display.summary == "s1"
    assert json.loads(folded.display.extra_json) == {"a": 1, "b": 2}
    assert log == before and target.display.title == "t0"


def test_dangling_calls_are_those_without_a_result_on_the_branch():
    path = [item("q", 1), call("c1", 2, "q", "x"), call("c2", 3, "c1", "y"), result("r1", 4, "c2", "x")]
    assert ids(tree.dangling_calls(path)) == ["c2"]


def test_page_cursor_and_negative_limit():
    entries = [item(str(i), i) for i in range(1, 8)]
    assert ids(tree.page(entries, 2, 3)) == ["3", "4", "5"]
    assert ids(tree.page(entries, 0, -2)) == ["6", "7"]
    assert ids(tree.page(entries, 6, 0)) == ["7"]


# -- property: appends through `link` always form one chain the walk follows --------------

ops = st.lists(st.one_of(st.just(("append",)), st.tuples(st.just("switch"), st.integers(0, 50))), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_linked_appends_and_leaf_moves_always_walk_back_to_the_root(script):
    log: list[Entry] = []
    seq = 0
    for op in script:
        seq += 1
        non_leaf = [e for e in log if e.kind != "leaf"]
        if op[0] == "switch" and non_leaf:
            new = [
                Entry(kind="leaf", entry_id=f"e{seq}", leaf_entry_id=non_leaf[op[1] % len(non_leaf)].entry_id)
            ]
        else:
            new = [Entry(kind="item", entry_id=f"e{seq}", item_type="message")]
        linked, _ = tree.link(tree.current_leaf(log), new)
        log += [dataclasses.replace(e, seq=seq) for e in linked]
        path = tree.branch(log)
        leaf_id = tree.current_leaf(log)
        if leaf_id:
            assert path[-1].entry_id == leaf_id
            assert path[0].parent_id == ""
            assert all(path[i].parent_id == path[i - 1].entry_id for i in range(1, len(path)))
            assert all(e.kind != "leaf" for e in path)
            assert [e.seq for e in path] == sorted(e.seq for e in path)
