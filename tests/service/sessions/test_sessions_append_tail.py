"""AppendEntries include_tail: the log after the stored entries as of the commit.

A writer that keeps a copy of the session (the run loop) learns from its own append that
the copy is current, instead of a ListEntries of its own. Every writer of a session mints
its seqs under the session's lock, so as of the commit nothing follows the batch: the
answer is an empty tail and the batch's last seq, with no read
(docs/decisions/0057-the-tail-as-of-the-commit.md). Another writer's entry is made to land
right after the batch commits by wrapping the real store's append (the same store writes
both; nothing is faked).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from sessions_helpers import BACKENDS, assistant, new_session, ref, text_of, user

from agentrt.sessions import codec
from agentrt.sessions.domain import Ref
from agentrt.sessions.storage.store import SessionStore
from agentrt.v1 import session_service_pb2 as pb

MARK = "batch-under-test"


def _after_mark(monkeypatch: pytest.MonkeyPatch, then) -> None:
    """Run `then(store, tenant, ref)` right after an append of the marked batch commits."""
    original = SessionStore.append

    async def append(self, tenant, ref, entries, expected_last_seq=None):
        stored = await original(self, tenant, ref, entries, expected_last_seq)
        if entries and entries[0].display.title == MARK:
            await then(self, original, tenant, ref, stored)
        return stored

    monkeypatch.setattr(SessionStore, "append", append)


def _marked(text: str) -> pb.Entry:
    return assistant(text, display=pb.Display(title=MARK))


async def _append(env, *entries: pb.Entry, **kw) -> pb.AppendEntriesResponse:
    return await env.stub.AppendEntries(
        pb.AppendEntriesRequest(session=ref("s"), entries=list(entries), **kw)
    )


async def test_the_tail_is_empty_and_reports_the_batch_as_the_last_seq(env):
    await new_session(env.stub, "s")
    await _append(env, user("hi"))
    resp = await _append(env, _marked("a"), assistant("b"), expected_last_seq=1, include_tail=True)
    assert [e.seq for e in resp.entries] == [2, 3]
    assert list(resp.tail) == [] and resp.tail_last_seq == 3


async def test_without_include_tail_nothing_is_read(env):
    await new_session(env.stub, "s")
    resp = await _append(env, user("hi"))
    assert list(resp.tail) == [] and resp.tail_last_seq == 0


async def test_an_entry_written_right_after_the_commit_meets_the_writers_next_guard(env, monkeypatch):
    async def foreign(store, append, tenant, ref_, stored):
        await append(store, tenant, ref_, codec.entries_in([user("from another writer")]), None)

    _after_mark(monkeypatch, foreign)
    await new_session(env.stub, "s")
    resp = await _append(env, _marked("mine"), include_tail=True)
    # As of the commit the batch was the log's end; the other writer's entry came after.
    assert list(resp.tail) == [] and resp.tail_last_seq == 1
    listed = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s"), after_seq=1))
    assert [text_of(e) for e in listed.entries] == ["from another writer"] and listed.last_seq == 2
    # The writer's next append, guarded by what it knows, is refused and changes nothing.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _append(env, assistant("next"), expected_last_seq=resp.tail_last_seq, include_tail=True)
    assert err.value.code() == grpc.StatusCode.ABORTED
    after = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s")))
    assert [e.seq for e in after.entries] == [1, 2]


async def test_a_batch_near_the_response_bound_still_reports_its_last_seq(env):
    # The tail costs nothing to carry: a 3 MiB batch answers tail_last_seq as a small one does.
    big = "x" * (3 * 1024 * 1024 - 4096)
    await new_session(env.stub, "s")
    resp = await _append(env, _marked(big), include_tail=True)
    assert len(resp.entries) == 1 and text_of(resp.entries[0]) == big
    assert list(resp.tail) == [] and resp.tail_last_seq == 1


async def test_a_new_incarnation_after_the_commit_leaves_the_answer_in_the_generation_that_took_it(
    env, monkeypatch
):
    # The session is deleted and created again under its id right after the batch commits:
    # the answer names the generation that took the write, and the writer's next append in
    # it is refused as stale.
    async def recreate(store, append, tenant, ref_, stored):
        await store.delete(tenant, Ref(ref_.session_id))
        await store.create(tenant, ref_.session_id)

    _after_mark(monkeypatch, recreate)
    s = await new_session(env.stub, "s")
    resp = await _append(env, _marked("mine"), include_tail=True)
    assert resp.generation == s.generation and [text_of(e) for e in resp.entries] == ["mine"]
    assert list(resp.tail) == [] and resp.tail_last_seq == 1
    again = await env.stub.GetSession(pb.GetSessionRequest(session=ref("s")))
    assert again.session.generation != s.generation
    stale = pb.SessionRef(session_id="s", generation=resp.generation)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await env.stub.AppendEntries(
            pb.AppendEntriesRequest(session=stale, entries=[assistant("next")], expected_last_seq=1)
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_racing_include_tail_appends_each_end_the_log_at_their_commit(env):
    # Twenty writers append at once: each answer's tail_last_seq is its own last entry's
    # seq, and the answers tile the log with no gap and no overlap.
    await new_session(env.stub, "s")

    async def one(i: int) -> pb.AppendEntriesResponse:
        return await _append(env, user(f"w{i}-a"), user(f"w{i}-b"), include_tail=True)

    answers = await asyncio.gather(*(one(i) for i in range(20)))
    for resp in answers:
        assert list(resp.tail) == [] and resp.tail_last_seq == resp.entries[-1].seq
        assert [e.seq for e in resp.entries] == [resp.entries[0].seq, resp.entries[0].seq + 1]
    seqs = sorted(e.seq for resp in answers for e in resp.entries)
    assert seqs == list(range(1, 41))
    listed = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s")))
    assert listed.last_seq == 40 and len(listed.entries) == 40


# PostgreSQL only: a SQLite read is one snapshot; the race needs PostgreSQL's READ COMMITTED.
@pytest.mark.parametrize("db_url", [BACKENDS[-1]], indirect=True)
async def test_an_append_between_the_reads_statements_is_in_the_entries_or_not_in_the_seq(env, monkeypatch):
    # ListEntries answers the entries after a seq and the highest seq
    # stored with two statements; on PostgreSQL each sees what committed before it. Another
    # writer's append lands right after the first of the two: the answer must still be one
    # log (every entry up to the reported seq is in it), or a reader that takes the seq as
    # its cursor skips that entry for good (seen with 20 racing include_tail appends).
    assert env.db_url.startswith("postgresql")
    from agentrt.sessions.storage import queries

    state: dict = {"store": None, "fired": False}
    original_list = SessionStore.list_entries

    async def list_entries(self, tenant, ref_, after_seq=0, limit=0):
        state["store"] = self
        return await original_list(self, tenant, ref_, after_seq, limit)

    async def foreign_once(tenant, session_id):
        if state["store"] is None or state["fired"]:
            return
        state["fired"] = True
        await SessionStore.append(
            state["store"], tenant, Ref(session_id), codec.entries_in([user("between")]), None
        )

    def wrapped(fn):
        async def run(conn, tenant, *args, **kw):
            got = await fn(conn, tenant, *args, **kw)
            # queries.tail(conn, tenant, session row); queries.entries(conn, tenant, session_id, ...)
            await foreign_once(tenant, args[0] if isinstance(args[0], str) else args[0]["session_id"])
            return got

        return run

    await new_session(env.stub, "s")
    await _append(env, user("hi"))
    monkeypatch.setattr(SessionStore, "list_entries", list_entries)
    monkeypatch.setattr(queries, "tail", wrapped(queries.tail))
    monkeypatch.setattr(queries, "entries", wrapped(queries.entries))
    listed = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s"), after_seq=1))
    assert state["fired"]
    assert [e.seq for e in listed.entries] == list(range(2, listed.last_seq + 1))
