"""Read responses stay within what a peer can receive (docs/services/sessions.md, Limits).

ListEntries cuts a page before 3.5 MiB of entries (at least one entry) and the caller pages
on with after_seq; GetContext never cuts a view silently: beyond 3.5 MiB it answers
FAILED_PRECONDITION/CONTEXT_TOO_LARGE and the caller reads it in pages with a limit.
"""

from __future__ import annotations

import grpc
import pytest
from sessions_helpers import append, new_session, ref, user

from agentrt.mesh.status import reason_of
from agentrt.sessions.codec import MAX_ENTRY_BYTES, MAX_RESPONSE_BYTES
from agentrt.v1 import session_service_pb2 as pb

BIG = 1536 * 1024  # two fit in one response budget, three do not


async def _big_session(env, n: int = 4) -> list[pb.Entry]:
    await new_session(env.stub, "s")
    stored = []
    for i in range(n):
        stored += await append(env.stub, "s", user(str(i) * BIG))
    return stored


async def test_list_entries_pages_within_the_byte_budget(env):
    stored = await _big_session(env)
    first = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s")))
    assert [e.entry_id for e in first.entries] == [e.entry_id for e in stored[:2]]
    assert first.ByteSize() <= MAX_RESPONSE_BYTES + 1024
    assert first.last_seq == stored[-1].seq
    # The caller continues from the last seq returned until it reaches last_seq.
    seen = list(first.entries)
    while seen[-1].seq < first.last_seq:
        page = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s"), after_seq=seen[-1].seq))
        assert page.entries
        seen += page.entries
    assert seen == stored
    # An explicit limit below the budget is honored as before; the newest-N form is cut the same way.
    assert len((await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s"), limit=1))).entries) == 1
    newest = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s"), limit=-3))
    assert [e.seq for e in newest.entries] == [e.seq for e in stored[1:3]]


async def test_context_beyond_the_budget_is_refused_not_cut(env):
    stored = await _big_session(env)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.stub.GetContext(pb.GetContextRequest(session=ref("s")))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "CONTEXT_TOO_LARGE"
    # Read in pages with a positive limit, it comes back whole.
    seen: list[pb.Entry] = []
    while True:
        after = seen[-1].seq if seen else 0
        page = await env.stub.GetContext(pb.GetContextRequest(session=ref("s"), after_seq=after, limit=2))
        if not page.entries:
            break
        seen += page.entries
    assert [e.entry_id for e in seen] == [e.entry_id for e in stored]
    # A view within the budget is answered as usual.
    assert len((await env.stub.GetContext(pb.GetContextRequest(session=ref("s"), limit=-2))).entries) == 2


async def test_entry_at_the_cap_is_accepted_and_readable(env):
    await new_session(env.stub, "s")
    # The largest text that keeps the serialized entry within the cap.
    probe = user("")
    text = "y" * (MAX_ENTRY_BYTES - probe.ByteSize() - 32)  # nested length prefixes grow
    entry = user(text)
    assert MAX_ENTRY_BYTES - 32 < entry.ByteSize() <= MAX_ENTRY_BYTES
    await append(env.stub, "s", entry)
    got = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s")))
    assert got.entries[0].item.message.content[0].text.text == text


async def test_a_write_whose_echo_would_not_fit_is_refused_and_writes_nothing(env):
    await new_session(env.stub, "s")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await append(env.stub, "s", user("a" * BIG), user("b" * BIG), user("c" * BIG))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "REQUEST_TOO_LARGE"
    got = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s")))
    assert list(got.entries) == []


async def test_every_answer_fits_a_default_client(env):
    """Two near-cap entries read back through a channel with gRPC's default 4 MiB limit."""
    stored = await _big_session(env, n=2)
    async with grpc.aio.insecure_channel(env.address, interceptors=[]) as channel:
        from agentrt.v1 import session_service_pb2_grpc as pb_grpc

        stub = pb_grpc.SessionServiceStub(channel)
        md = [("x-agentrt-tenant", env.tenant)]
        seen: list[pb.Entry] = []
        while not seen or seen[-1].seq < stored[-1].seq:
            after = seen[-1].seq if seen else 0
            page = await stub.ListEntries(
                pb.ListEntriesRequest(session=ref("s"), after_seq=after), metadata=md
            )
            seen += page.entries
        assert [e.entry_id for e in seen] == [e.entry_id for e in stored]
