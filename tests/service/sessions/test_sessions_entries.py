"""Appends and raw reads (004 §2.5b, §2.5c, §2.5e2, §2.7f): seqs, cursors, open kinds, usage."""

from __future__ import annotations

import grpc
import pytest
from sessions_helpers import append, assistant, call, new_session, ref, result, text_of, user

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb


async def read(stub, session_id: str, after_seq: int = 0, limit: int = 0) -> pb.ListEntriesResponse:
    return await stub.ListEntries(
        pb.ListEntriesRequest(session=ref(session_id), after_seq=after_seq, limit=limit)
    )


async def test_append_assigns_increasing_seqs_ids_and_parents(env):
    s = await new_session(env.stub, "s")
    first = await append(env.stub, "s", user("hi"), call("c1"))
    second = await append(env.stub, "s", result("c1"), assistant("done"))
    stored = first + second
    seqs = [e.seq for e in stored]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert len({e.entry_id for e in stored}) == 4
    assert stored[0].parent_id == ""
    assert [e.parent_id for e in stored[1:]] == [e.entry_id for e in stored[:-1]]
    resp = await env.stub.AppendEntries(pb.AppendEntriesRequest(session=ref("s"), entries=[user("more")]))
    assert resp.generation == s.generation


async def test_storage_ignores_caller_assigned_positions(env):
    await new_session(env.stub, "s")
    forged = user("x", entry_id="e-forged", seq=999, parent_id="e-nowhere")
    stored = await append(env.stub, "s", forged)
    assert stored[0].entry_id != "e-forged" and stored[0].seq != 999 and stored[0].parent_id == ""


async def test_items_round_trip_byte_for_byte(env):
    await new_session(env.stub, "s")
    odd_args = '{"cmd":  "echo \\u00e9",  "n": 1.50}'
    sent = call(
        "c1",
        arguments=odd_args,
        display=pb.Display(title="exec", extra_json='{"k": [1]}'),
        run_id="run_1",
        turn=3,
        response_id="resp_1",
    )
    stored = await append(env.stub, "s", sent)
    back = (await read(env.stub, "s")).entries[0]
    assert back.item.tool_call.arguments == odd_args
    assert back.item == sent.item and back.display == sent.display
    assert (back.run_id, back.turn, back.response_id) == ("run_1", 3, "resp_1")
    assert back == stored[0]


async def test_unknown_kind_is_stored_and_returned(env):
    await new_session(env.stub, "s")
    weird = pb.Entry(kind="x-vendor.thing/v2", payload_json='{"a": [1, 2]}', summary="kept")
    await append(env.stub, "s", weird, pb.Entry(kind="annotation", payload_json='"note"'))
    entries = (await read(env.stub, "s")).entries
    assert [e.kind for e in entries] == ["x-vendor.thing/v2", "annotation"]
    assert entries[0].payload_json == '{"a": [1, 2]}'


async def test_after_seq_cursor_and_limits(env):
    await new_session(env.stub, "s")
    stored = await append(env.stub, "s", *[user(str(i)) for i in range(10)])
    seqs = [e.seq for e in stored]
    page = await read(env.stub, "s", after_seq=seqs[3], limit=4)
    assert [e.seq for e in page.entries] == seqs[4:8] and page.last_seq == seqs[-1]
    assert [e.seq for e in (await read(env.stub, "s", after_seq=seqs[7])).entries] == seqs[8:]
    recent = await read(env.stub, "s", limit=-3)
    assert [text_of(e) for e in recent.entries] == ["7", "8", "9"]
    assert [e.seq for e in (await read(env.stub, "s", after_seq=seqs[8], limit=-5)).entries] == seqs[9:]
    assert (await read(env.stub, "s", after_seq=seqs[-1])).entries == []


async def test_expected_last_seq_guards_an_append(env):
    await new_session(env.stub, "s")
    await append(env.stub, "s", user("a"), expected_last_seq=0)
    last = (await read(env.stub, "s")).last_seq
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await append(env.stub, "s", user("stale"), expected_last_seq=0)
    assert info.value.code() == grpc.StatusCode.ABORTED and reason_of(info.value) == "SEQ_MISMATCH"
    assert (await read(env.stub, "s")).last_seq == last
    await append(env.stub, "s", user("b"), expected_last_seq=last)


async def test_usage_is_kept_on_one_entry_per_response(env):
    await new_session(env.stub, "s")
    usage = cpb.Usage(input_tokens=100, output_tokens=20, requests=1)
    nested = cpb.Usage(input_tokens=7, output_tokens=3, requests=1)
    stored = await append(
        env.stub,
        "s",
        assistant("thinking aloud", response_id="r1"),
        call("c1", response_id="r1", usage=usage),
        result("c1", nested_usage=nested),
    )
    assert not stored[0].HasField("usage") and stored[1].usage == usage
    assert stored[2].nested_usage == nested and not stored[2].HasField("usage")
    # A second entry claiming r1's usage would double the bill (004 §2.7f).
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await append(env.stub, "s", assistant("again", response_id="r1", usage=usage))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "USAGE_ALREADY_RECORDED"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await append(
            env.stub,
            "s",
            assistant("x", response_id="r2", usage=usage),
            assistant("y", response_id="r2", usage=usage),
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(info.value) == "INVALID_ENTRY"
    # Usage with no response id (a backend that returns none) is still recorded.
    await append(env.stub, "s", assistant("z", usage=usage), assistant("w", usage=usage))
    assert (await read(env.stub, "s")).last_seq == stored[-1].seq + 2
