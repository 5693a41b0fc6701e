"""An append is one database step (decision 0025): a refused one changes nothing, an
accepted one is linked and numbered as the log it lands on says.

On PostgreSQL the append is the function `sessions_append` (sessions migration 0002), on
SQLite the same steps in driver SQL; both run here through the production server. What a
refusal must leave untouched: the entries, the session's change record (update_time), and
the seq high-water mark (the next accepted append continues at the next seq, no gap).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from sessions_helpers import append, assistant, call, new_session, ref, result, user

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb


async def _state(env) -> tuple[int, int, int]:
    got = (await env.stub.GetSession(pb.GetSessionRequest(session=ref("s")))).session
    return got.last_seq, got.entry_count, got.update_time.ToMicroseconds()


USAGE = cpb.Usage(input_tokens=5, output_tokens=1, requests=1)


@pytest.mark.parametrize(
    ("case", "code", "reason"),
    [
        ("fence", grpc.StatusCode.ABORTED, "SEQ_MISMATCH"),
        ("unknown-leaf", grpc.StatusCode.NOT_FOUND, "ENTRY_NOT_FOUND"),
        ("leaf-of-a-leaf-move", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ENTRY"),
        ("usage-again", grpc.StatusCode.FAILED_PRECONDITION, "USAGE_ALREADY_RECORDED"),
        ("old-generation", grpc.StatusCode.NOT_FOUND, "STALE_GENERATION"),
    ],
)
async def test_a_refused_append_changes_nothing(env, case, code, reason):
    session = await new_session(env.stub, "s")
    first = await append(env.stub, "s", user("hi"), assistant("a", response_id="r1", usage=USAGE))
    move = await append(env.stub, "s", pb.Entry(kind="leaf", leaf_entry_id=first[0].entry_id))
    generation = 0
    if case == "old-generation":
        await env.stub.DeleteSession(pb.DeleteSessionRequest(session=ref("s")))
        await new_session(env.stub, "s")
        await append(env.stub, "s", user("1"), user("2"), user("3"))
        generation = session.generation
    await asyncio.sleep(0.002)  # a write after this would move the change record
    before = await _state(env)
    batch: list[pb.Entry] = [assistant("mine")]
    kw: dict = {}
    if case == "fence":
        kw["expected_last_seq"] = 1
    elif case == "unknown-leaf":
        batch.append(pb.Entry(kind="leaf", leaf_entry_id="ent_nowhere"))
    elif case == "leaf-of-a-leaf-move":
        batch.append(pb.Entry(kind="leaf", leaf_entry_id=move[0].entry_id))
    elif case == "usage-again":
        batch.append(assistant("b", response_id="r1", usage=USAGE))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await append(env.stub, "s", *batch, generation=generation, **kw)
    assert info.value.code() == code and reason_of(info.value) == reason
    assert await _state(env) == before
    # No seq was minted by the refusal: the next append continues at the next one.
    after = await append(env.stub, "s", user("next"))
    assert after[0].seq == before[0] + 1


async def test_a_batch_links_to_the_active_leaf_and_through_its_own_leaf_moves(env):
    await new_session(env.stub, "s")
    first = await append(env.stub, "s", user("q"), assistant("a1"))
    # Back to the question, then a batch that answers it again, moves back, and goes on.
    stored = await append(
        env.stub,
        "s",
        pb.Entry(kind="leaf", leaf_entry_id=first[0].entry_id),
        assistant("a2"),
        pb.Entry(kind="leaf", leaf_entry_id=first[1].entry_id),
        call("c1", response_id="r9", usage=USAGE),
        result("c1"),
    )
    assert [e.seq for e in stored] == [3, 4, 5, 6, 7]
    assert [e.parent_id for e in stored] == [
        first[1].entry_id,  # a leaf move is a child of the leaf it moves away from
        first[0].entry_id,
        stored[1].entry_id,
        first[1].entry_id,
        stored[3].entry_id,
    ]
    assert len({e.entry_id for e in stored}) == 5 and all(e.entry_id.startswith("ent_") for e in stored)
    assert len({e.create_time.ToMicroseconds() for e in stored}) == 1
    # The next batch hangs under the last one; the listed log is what the append answered.
    nxt = await append(env.stub, "s", assistant("done"), expected_last_seq=7)
    assert nxt[0].parent_id == stored[-1].entry_id and nxt[0].seq == 8
    listed = await env.stub.ListEntries(pb.ListEntriesRequest(session=ref("s"), after_seq=2))
    assert list(listed.entries)[:5] == stored
