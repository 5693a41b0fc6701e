"""Trees, the context view, compaction, guarded replace and recovery (004 §2.5b–§2.5h)."""

from __future__ import annotations

import json

import grpc
import pytest
from sessions_helpers import append, assistant, call, context_texts, new_session, ref, result, text_of, user

from agentrt.mesh.status import reason_of
from agentrt.sessions.codec import INTERRUPTED_OUTPUT
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb


async def raw(stub, session_id: str) -> list[pb.Entry]:
    return list((await stub.ListEntries(pb.ListEntriesRequest(session=ref(session_id)))).entries)


async def test_switch_branch_abandons_without_deleting(env):
    await new_session(env.stub, "s")
    q, a1 = await append(env.stub, "s", user("question"), assistant("first try"))
    switched = (
        await env.stub.SwitchBranch(pb.SwitchBranchRequest(session=ref("s"), leaf_entry_id=q.entry_id))
    ).entry
    assert switched.kind == "leaf" and switched.leaf_entry_id == q.entry_id
    (a2,) = await append(env.stub, "s", assistant("second try"))
    assert a2.parent_id == q.entry_id
    view = await env.stub.GetContext(pb.GetContextRequest(session=ref("s")))
    assert [text_of(e) for e in view.entries] == ["question", "second try"]
    assert view.leaf_entry_id == a2.entry_id
    # The abandoned attempt is still recorded.
    assert "first try" in [text_of(e) for e in await raw(env.stub, "s")]
    # Switching back restores the first branch.
    await env.stub.SwitchBranch(pb.SwitchBranchRequest(session=ref("s"), leaf_entry_id=a1.entry_id))
    assert await context_texts(env.stub, "s") == ["question", "first try"]


async def test_switch_branch_to_unknown_entry_is_not_found(env):
    await new_session(env.stub, "s")
    await append(env.stub, "s", user("q"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.stub.SwitchBranch(pb.SwitchBranchRequest(session=ref("s"), leaf_entry_id="ent_missing"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and reason_of(info.value) == "ENTRY_NOT_FOUND"
    assert len(await raw(env.stub, "s")) == 1


async def test_context_projects_items_and_checkpoints_only_by_default(env):
    await new_session(env.stub, "s")
    await append(
        env.stub,
        "s",
        user("u"),
        pb.Entry(kind="annotation", summary="note"),
        pb.Entry(kind="terminal_output", payload_json='{"stdout": "x"}', summary="term"),
        pb.Entry(kind="brand-new-kind", summary="future"),
        assistant("a"),
    )
    assert await context_texts(env.stub, "s") == ["u", "a"]
    full = await context_texts(env.stub, "s", include_unprojected=True)
    assert full == ["u", "note", "term", "future", "a"]


async def test_context_pages_after_the_walk(env):
    await new_session(env.stub, "s")
    stored = await append(env.stub, "s", *[user(str(i)) for i in range(6)])
    assert await context_texts(env.stub, "s", limit=-2) == ["4", "5"]
    assert await context_texts(env.stub, "s", after_seq=stored[1].seq, limit=2) == ["2", "3"]


async def test_updates_fold_at_read_time_last_write_wins(env):
    await new_session(env.stub, "s")
    (c,) = await append(env.stub, "s", call("c1", display=pb.Display(title="run ls", extra_json='{"a": 1}')))
    await append(
        env.stub,
        "s",
        pb.Entry(kind="update", target_entry_id=c.entry_id, display=pb.Display(summary="running")),
        pb.Entry(
            kind="update", target_call_id="c1", display=pb.Display(summary="done", extra_json='{"b": 2}')
        ),
        pb.Entry(kind="update", target_entry_id="ent_gone", display=pb.Display(summary="ignored")),
        result("c1"),
    )
    view = (await env.stub.GetContext(pb.GetContextRequest(session=ref("s")))).entries
    assert [e.kind for e in view] == ["item", "item"]  # updates are folded, not shown
    folded = view[0].display
    assert folded.title == "run ls" and folded.summary == "done"
    assert json.loads(folded.extra_json) == {"a": 1, "b": 2}
    # The fold never writes through: the stored entry is unchanged, and reads repeat.
    assert (await raw(env.stub, "s"))[0].display == pb.Display(title="run ls", extra_json='{"a": 1}')
    again = (await env.stub.GetContext(pb.GetContextRequest(session=ref("s")))).entries
    assert list(again) == list(view)


async def test_update_stored_before_its_target_still_applies(env):
    await new_session(env.stub, "s")
    await append(
        env.stub, "s", pb.Entry(kind="update", target_call_id="late", display=pb.Display(title="card"))
    )
    await append(env.stub, "s", call("late"))
    view = (await env.stub.GetContext(pb.GetContextRequest(session=ref("s")))).entries
    assert view[-1].display.title == "card"


async def test_compaction_checkpoint_folds_entries_out_of_the_view(env):
    await new_session(env.stub, "s")
    old = await append(env.stub, "s", user("old q"), assistant("old a"), user("kept q"))
    checkpoint = pb.Entry(
        kind="compaction",
        folded_entry_ids=[old[0].entry_id, old[1].entry_id],
        summary="they talked about old things",
    )
    await append(env.stub, "s", checkpoint, assistant("new a"))
    view = (await env.stub.GetContext(pb.GetContextRequest(session=ref("s")))).entries
    assert [text_of(e) for e in view] == ["kept q", "they talked about old things", "new a"]
    assert view[1].kind == "compaction" and list(view[1].folded_entry_ids) == [e.entry_id for e in old[:2]]
    # Nothing was deleted.
    assert len(await raw(env.stub, "s")) == 5


async def test_fork_copies_a_branch_keeping_entry_ids(env):
    await new_session(env.stub, "src", title="origin", metadata={"k": "v"})
    q, a1 = await append(env.stub, "src", user("q"), call("c1"))
    await env.stub.SwitchBranch(pb.SwitchBranchRequest(session=ref("src"), leaf_entry_id=q.entry_id))
    (a2,) = await append(env.stub, "src", assistant("other branch"))
    await append(
        env.stub, "src", pb.Entry(kind="update", target_entry_id=a2.entry_id, display=pb.Display(title="t"))
    )
    fork = (
        await env.stub.ForkSession(pb.ForkSessionRequest(session=ref("src"), new_session_id="f1"))
    ).session
    assert fork.session_id == "f1" and fork.title == "origin" and dict(fork.metadata) == {"k": "v"}
    copied = await raw(env.stub, "f1")
    assert fork.entry_count == len(copied) == 3
    assert [e.entry_id for e in copied[:2]] == [q.entry_id, a2.entry_id]
    view = (await env.stub.GetContext(pb.GetContextRequest(session=ref("f1")))).entries
    assert [text_of(e) for e in view] == ["q", "other branch"] and view[1].display.title == "t"
    # Fork from a named leaf: the abandoned branch.
    await env.stub.ForkSession(
        pb.ForkSessionRequest(session=ref("src"), leaf_entry_id=a1.entry_id, new_session_id="f2")
    )
    assert await context_texts(env.stub, "f2") == ["q", "call:c1"]
    # The source is untouched; a fork into a taken id is refused.
    assert len(await raw(env.stub, "src")) == 5
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.stub.ForkSession(pb.ForkSessionRequest(session=ref("src"), new_session_id="f1"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_guarded_replace_swaps_atomically_or_aborts(env):
    await new_session(env.stub, "s")
    stored = await append(env.stub, "s", user("q1"), assistant("a1"), user("q2"))
    last = stored[-1].seq
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.stub.ReplaceEntries(
            pb.ReplaceEntriesRequest(session=ref("s"), expected_last_seq=last - 1, entries=[user("lost")])
        )
    assert info.value.code() == grpc.StatusCode.ABORTED and reason_of(info.value) == "SEQ_MISMATCH"
    assert [e.entry_id for e in await raw(env.stub, "s")] == [e.entry_id for e in stored]
    summary = pb.Entry(kind="compaction", folded_entry_ids=[stored[0].entry_id], summary="s")
    kept = user("q2", entry_id=stored[2].entry_id)
    out = (
        await env.stub.ReplaceEntries(
            pb.ReplaceEntriesRequest(session=ref("s"), expected_last_seq=last, entries=[summary, kept])
        )
    ).entries
    # Carried-over entries keep their ids and take fresh seqs; numbering never restarts.
    assert out[1].entry_id == stored[2].entry_id and min(e.seq for e in out) > last
    assert [e.entry_id for e in await raw(env.stub, "s")] == [e.entry_id for e in out]
    # Clearing is a replace with nothing; the next append still numbers past every seq.
    await env.stub.ReplaceEntries(pb.ReplaceEntriesRequest(session=ref("s"), expected_last_seq=out[-1].seq))
    assert await raw(env.stub, "s") == []
    (after,) = await append(env.stub, "s", user("fresh"), expected_last_seq=0)
    assert after.seq > out[-1].seq


async def test_replace_refuses_ids_that_are_not_carried_over(env):
    await new_session(env.stub, "s")
    (e,) = await append(env.stub, "s", user("q"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.stub.ReplaceEntries(
            pb.ReplaceEntriesRequest(
                session=ref("s"), expected_last_seq=e.seq, entries=[user("x", entry_id="ent_invented")]
            )
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(info.value) == "INVALID_ENTRY"
    assert [x.entry_id for x in await raw(env.stub, "s")] == [e.entry_id]


async def test_recover_closes_dangling_calls_except_retry_safe(env):
    await new_session(env.stub, "s")
    await append(
        env.stub,
        "s",
        user("go"),
        call("c1", name="send_email"),
        call("c2", name="read_file"),
        call("c3", name="exec_command"),
        result("c3"),
    )
    resp = await env.stub.RecoverSession(
        pb.RecoverSessionRequest(session=ref("s"), retry_safe_tools=["read_file"])
    )
    assert [e.item.tool_result.call_id for e in resp.entries] == ["c1"]
    out = resp.entries[0].item.tool_result
    assert out.is_error and out.status == cpb.TOOL_RESULT_STATUS_INTERRUPTED
    assert out.content == INTERRUPTED_OUTPUT and "unknown" in out.content and "not assume" in out.content
    assert resp.entries[0].item.source == pb.ITEM_SOURCE_RUNTIME
    # Idempotent: nothing dangles any more except the retry-safe call.
    again = await env.stub.RecoverSession(
        pb.RecoverSessionRequest(session=ref("s"), retry_safe_tools=["read_file"])
    )
    assert list(again.entries) == []
    final = await env.stub.RecoverSession(pb.RecoverSessionRequest(session=ref("s")))
    assert [e.item.tool_result.call_id for e in final.entries] == ["c2"]


async def test_recover_reads_the_active_branch_only(env):
    await new_session(env.stub, "s")
    q, _ = await append(env.stub, "s", user("q"), call("abandoned"))
    await env.stub.SwitchBranch(pb.SwitchBranchRequest(session=ref("s"), leaf_entry_id=q.entry_id))
    await append(env.stub, "s", assistant("answered without tools"))
    resp = await env.stub.RecoverSession(pb.RecoverSessionRequest(session=ref("s")))
    assert list(resp.entries) == []
