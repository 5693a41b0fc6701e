"""StreamRunEvents: reconnect from a seq, session streams, slow subscribers, stale cursors."""

from __future__ import annotations

import asyncio

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent, start_mesh


def script_two_turns(emu):
    emu.script(
        [Reply(text="looking", tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="all done here")]
    )


async def test_reconnect_with_after_seq_gets_the_rest(mesh):
    script_two_turns(mesh.emu)
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    first = await mesh.events(started.run_id, limit=4)
    rest = await mesh.events(started.run_id, after_seq=first[-1].seq)
    seqs = [e.seq for e in first + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert rest[-1].WhichOneof("payload") == "stream_end"
    # the whole stream again, from the start, is the same timeline
    again = await mesh.events(started.run_id)
    assert [e.SerializeToString() for e in again] == [e.SerializeToString() for e in first + rest]
    # a finished run's stream replays and ends; nothing after the end
    assert await mesh.events(started.run_id, after_seq=seqs[-1]) == []


async def test_stale_cursor_is_a_reset_gap(mesh):
    mesh.emu.script([Reply(text="hi")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    events = await mesh.events(started.run_id, after_seq=10_000)
    gap = events[0].gap
    assert events[0].WhichOneof("payload") == "gap"
    assert (gap.last_good, gap.dropped, gap.next, gap.at_end) == (0, 10_000, 1, False)
    assert [e.seq for e in events[1:]] == list(range(1, len(events)))
    assert events[-1].WhichOneof("payload") == "stream_end"


async def test_session_stream_follows_every_run_of_the_session(mesh):
    mesh.emu.script([Reply(text="first answer")])
    one = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="one"))
    await mesh.wait_status(one.run_id, cpb.RUN_STATUS_COMPLETED)

    received: list[pb.RunEvent] = []
    ends = asyncio.Event()

    async def follow():
        call = mesh.runs.StreamRunEvents(pb.StreamRunEventsRequest(session_id=one.session_id))
        async for msg in call:
            received.append(msg.event)
            if sum(1 for e in received if e.WhichOneof("payload") == "stream_end") == 2:
                ends.set()
                call.cancel()
                return

    follower = asyncio.create_task(follow())
    script_two_turns(mesh.emu)
    two = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="two", session_id=one.session_id))
    await asyncio.wait_for(ends.wait(), WAIT_S)
    await follower
    assert [e.seq for e in received] == list(range(1, len(received) + 1))
    run_ids = [e.run_id for e in received]
    assert run_ids[0] == one.run_id and run_ids[-1] == two.run_id
    assert run_ids.index(two.run_id) == run_ids.index(one.run_id) + run_ids.count(one.run_id)
    # the second run saw the first run's exchange: the session is one conversation
    assert "first answer" in str(mesh.emu.requests[1][1])


async def test_slow_subscriber_loses_nothing(start_server, tmp_path, emulator, monkeypatch):
    from agentrt.runs.events import hub as events_mod

    markers = []
    real = events_mod.GapMarker

    def counting(*args):
        markers.append(args)
        return real(*args)

    monkeypatch.setattr(events_mod, "GapMarker", counting)
    # one event of buffer: a burst of events published together overflows it
    mesh = await start_mesh(start_server, tmp_path, emulator, subscriber_buffer=1)
    emulator.script(
        [Reply(text="x" * 400, tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="y" * 400)]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    events = await mesh.events(started.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert "gap" not in [e.WhichOneof("payload") for e in events]
    assert events[-1].WhichOneof("payload") == "stream_end"
    assert markers, "the subscriber never fell behind; the test proves nothing"


@pytest.mark.parametrize("after", [-1])
async def test_negative_after_seq_is_invalid(mesh, after):
    import grpc

    from agentrt.mesh.status import reason_of

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.events("run_x", after_seq=after)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(info.value) == "INVALID_VALUE"


async def _messages(mesh, run_id: str, batch: bool) -> list[pb.StreamRunEventsResponse]:
    request = pb.StreamRunEventsRequest(run_id=run_id, batch_events=batch)
    return [msg async for msg in mesh.runs.StreamRunEvents(request)]


async def test_batched_messages_carry_the_same_timeline_in_fewer_messages(mesh):
    script_two_turns(mesh.emu)
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    # live: the response, its phase change and its tool call are released together after
    # the save that logs them, so one message carries them
    live = await _messages(mesh, started.run_id, batch=True)
    unpacked = [e for m in live for e in (m.event, *m.more_events)]
    assert [e.seq for e in unpacked] == list(range(1, len(unpacked) + 1))
    assert unpacked[-1].WhichOneof("payload") == "stream_end"
    assert any(
        [e.WhichOneof("payload") for e in (m.event, *m.more_events)][:1] == ["model_responded"]
        and "tool_called" in [e.WhichOneof("payload") for e in m.more_events]
        for m in live
    )
    assert len(live) < len(unpacked)
    # replayed: the same timeline as one event per message, which is what a client that
    # did not ask for batches gets (more_events stays empty)
    single = await _messages(mesh, started.run_id, batch=False)
    assert all(not m.more_events for m in single)
    assert [m.event.SerializeToString() for m in single] == [e.SerializeToString() for e in unpacked]
    replayed = await _messages(mesh, started.run_id, batch=True)
    assert [e.SerializeToString() for m in replayed for e in (m.event, *m.more_events)] == [
        e.SerializeToString() for e in unpacked
    ]
