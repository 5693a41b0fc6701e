"""Session lifecycles (004 §2.5e, §2.5e2): existence, listing, deletion, generations, tenancy."""

from __future__ import annotations

import grpc
import pytest
from sessions_helpers import append, new_session, ref, user

from agentrt.mesh.status import reason_of
from agentrt.v1 import session_service_pb2 as pb


async def expect(code: grpc.StatusCode, reason: str, coro) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro
    assert info.value.code() == code, info.value.details()
    assert reason_of(info.value) == reason


async def test_create_get_and_empty_session_is_listed(env):
    created = await new_session(env.stub, "s1", title="first", metadata={"owner": "ann"})
    assert created.session_id == "s1" and created.generation >= 1
    assert created.last_seq == 0 and created.entry_count == 0
    got = (await env.stub.GetSession(pb.GetSessionRequest(session=ref("s1")))).session
    assert got.title == "first" and dict(got.metadata) == {"owner": "ann"}
    listed = (await env.stub.ListSessions(pb.ListSessionsRequest())).sessions
    assert [s.session_id for s in listed] == ["s1"]


async def test_server_mints_an_id_when_none_is_given(env):
    a = await new_session(env.stub)
    b = await new_session(env.stub)
    assert a.session_id and b.session_id and a.session_id != b.session_id


async def test_get_reports_folds_over_the_log(env):
    await new_session(env.stub, "s")
    stored = await append(env.stub, "s", user("a"), user("b"))
    got = (await env.stub.GetSession(pb.GetSessionRequest(session=ref("s")))).session
    assert got.last_seq == stored[-1].seq and got.entry_count == 2
    assert got.update_time.ToMicroseconds() >= got.create_time.ToMicroseconds()


async def test_list_is_newest_change_first_and_hides_hidden(env):
    for name in ("a", "b", "c"):
        await new_session(env.stub, name)
    await new_session(env.stub, "task-history", hidden=True, parent_session_id="a")
    await append(env.stub, "a", user("moves a to the front"))
    listed = (await env.stub.ListSessions(pb.ListSessionsRequest())).sessions
    assert [s.session_id for s in listed] == ["a", "c", "b"]
    everything = (await env.stub.ListSessions(pb.ListSessionsRequest(include_hidden=True))).sessions
    assert {s.session_id for s in everything} == {"a", "b", "c", "task-history"}


async def test_list_pages_after_the_hidden_filter(env):
    for i in range(5):
        await new_session(env.stub, f"s{i}")
        await new_session(env.stub, f"h{i}", hidden=True, parent_session_id=f"s{i}")
    seen: list[str] = []
    token = ""
    while True:
        page = await env.stub.ListSessions(pb.ListSessionsRequest(page_size=2, page_token=token))
        assert len(page.sessions) <= 2
        seen.extend(s.session_id for s in page.sessions)
        token = page.next_page_token
        if not token:
            break
    assert seen == ["s4", "s3", "s2", "s1", "s0"]


async def test_duplicate_create_is_already_exists(env):
    await new_session(env.stub, "dup")
    await expect(grpc.StatusCode.ALREADY_EXISTS, "SESSION_EXISTS", new_session(env.stub, "dup"))


async def test_unknown_parent_is_not_found_and_never_created(env):
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        new_session(env.stub, "child", hidden=True, parent_session_id="nobody"),
    )
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        env.stub.GetSession(pb.GetSessionRequest(session=ref("nobody"))),
    )
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        env.stub.GetSession(pb.GetSessionRequest(session=ref("child"))),
    )


async def test_opening_an_unknown_session_is_not_found(env):
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        env.stub.ListEntries(pb.ListEntriesRequest(session=ref("never"))),
    )
    await expect(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", append(env.stub, "never", user("x")))


async def test_delete_removes_entries_atomically_and_hidden_children(env):
    await new_session(env.stub, "p")
    await new_session(env.stub, "kid", hidden=True, parent_session_id="p")
    await new_session(env.stub, "grandkid", hidden=True, parent_session_id="kid")
    await append(env.stub, "p", user("1"), user("2"))
    await append(env.stub, "kid", user("3"))
    resp = await env.stub.DeleteSession(pb.DeleteSessionRequest(session=ref("p")))
    assert resp.deleted_entries == 3
    for name in ("p", "kid", "grandkid"):
        await expect(
            grpc.StatusCode.NOT_FOUND,
            "SESSION_NOT_FOUND",
            env.stub.GetSession(pb.GetSessionRequest(session=ref(name))),
        )
    assert (await env.stub.ListSessions(pb.ListSessionsRequest(include_hidden=True))).sessions == []


async def test_recreated_session_is_a_new_incarnation(env):
    first = await new_session(env.stub, "s")
    old = await append(env.stub, "s", user("old 1"), user("old 2"))
    await env.stub.DeleteSession(pb.DeleteSessionRequest(session=ref("s", first.generation)))
    second = await new_session(env.stub, "s")
    assert second.generation > first.generation
    # A handle to the dead incarnation can neither read nor write the new one.
    old_ref = ref("s", first.generation)
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "STALE_GENERATION",
        env.stub.ListEntries(pb.ListEntriesRequest(session=old_ref)),
    )
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "STALE_GENERATION",
        append(env.stub, "s", user("lost"), generation=first.generation),
    )
    await expect(
        grpc.StatusCode.NOT_FOUND,
        "STALE_GENERATION",
        env.stub.DeleteSession(pb.DeleteSessionRequest(session=old_ref)),
    )
    # Seqs are never reused: the new incarnation continues past the old high-water mark.
    new = await append(env.stub, "s", user("new"), generation=second.generation)
    assert new[0].seq > old[-1].seq
    assert {e.entry_id for e in new}.isdisjoint({e.entry_id for e in old})
    entries = (await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s")))).entries
    assert [e.entry_id for e in entries] == [new[0].entry_id]


async def test_another_tenants_session_is_not_found(env):
    await new_session(env.stub, "mine")
    await append(env.stub, "mine", user("secret"))
    other = env.as_tenant("someone-else-" + env.tenant[-8:])
    calls = [
        other.GetSession(pb.GetSessionRequest(session=ref("mine"))),
        other.ListEntries(pb.ListEntriesRequest(session=ref("mine"))),
        other.GetContext(pb.GetContextRequest(session=ref("mine"))),
        append(other, "mine", user("intrusion")),
        other.DeleteSession(pb.DeleteSessionRequest(session=ref("mine"))),
        other.ForkSession(pb.ForkSessionRequest(session=ref("mine"))),
        other.RecoverSession(pb.RecoverSessionRequest(session=ref("mine"))),
        other.SwitchBranch(pb.SwitchBranchRequest(session=ref("mine"), leaf_entry_id="e1")),
    ]
    for coro in calls:
        await expect(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", coro)
    assert (await other.ListSessions(pb.ListSessionsRequest())).sessions == []
    # The other tenant may use the same id for its own session.
    await new_session(other, "mine")
    mine = (await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("mine")))).entries
    assert len(mine) == 1


async def test_an_unreachable_database_is_unavailable_not_absent():
    from agentrt.core.errors import MeshError, Status
    from agentrt.mesh.storage.db import Database
    from agentrt.sessions.domain import Ref
    from agentrt.sessions.storage.store import SessionStore

    db = Database("postgresql+asyncpg://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(MeshError) as info:
            await SessionStore(db).get("t", Ref("s"))
        assert info.value.status == Status.UNAVAILABLE and info.value.reason == "DEPENDENCY_UNAVAILABLE"
    finally:
        await db.close()
