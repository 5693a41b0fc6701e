"""Event fan-out and following (004 §2.11): bounded buffers, gaps, replay + live, resets."""

from __future__ import annotations

from agentrt.runs.domain import StoredEvent
from agentrt.runs.events.hub import EventHub, GapMarker, Subscription, run_topic, session_topic
from agentrt.runs.events.stream import follow
from agentrt.v1 import run_service_pb2 as pb


def ev(seq: int, kind: str = "turn_started") -> pb.RunEvent:
    if kind == "stream_end":
        return pb.RunEvent(seq=seq, run_id="r", stream_end=pb.StreamEnd())
    return pb.RunEvent(seq=seq, run_id="r", turn_started=pb.TurnStarted(turn=seq))


async def test_full_buffer_drops_and_reports_a_gap_before_the_next_event():
    sub = Subscription(run_topic("r"), capacity=2)
    for seq in range(1, 6):
        sub.offer(seq, ev(seq))  # never blocks: 3, 4, 5 are dropped
    assert (await sub.next(0))[0] == 1
    assert (await sub.next(0))[0] == 2
    sub.offer(6, ev(6))
    assert await sub.next(0) == GapMarker(last_good=2, dropped=3, next=6)
    assert (await sub.next(0))[0] == 6
    assert await sub.next(0) is None  # nothing buffered: timeout 0 returns at once


async def test_a_drop_with_nothing_after_it_is_still_reported():
    sub = Subscription(run_topic("r"), capacity=1)
    sub.offer(1, ev(1))
    sub.offer(2, ev(2))  # dropped, and nothing is ever published again
    assert (await sub.next(0))[0] == 1
    assert await sub.next(0) == GapMarker(last_good=1, dropped=1, next=0)


def stored(seq: int, session_seq: int | None = None, kind: str = "turn_started") -> StoredEvent:
    return StoredEvent("r", seq, "t", "s", session_seq or seq, ev(seq, kind))


class FakeStorage:
    def __init__(self, events: list[StoredEvent]) -> None:
        self.events = events

    async def read(self, after: int, upto: int | None) -> list[StoredEvent]:
        return [e for e in self.events if e.seq > after and (upto is None or e.seq <= upto)]


async def collect(agen, n: int) -> list[pb.RunEvent]:
    out = []
    async for e in agen:
        out.append(e)
        if len(out) == n:
            break
    return out


async def test_replay_then_live_then_end():
    hub = EventHub(capacity=8)
    storage = FakeStorage([stored(1), stored(2)])
    channel = hub.open("r", "t", "s", seq=2, session_seq=2, reserved=100)
    agen = follow(hub, run_topic("r"), storage.read, 0, poll_seconds=5)
    first = await agen.__anext__()
    assert first.seq == 1
    channel.publish(1, turn_started=pb.TurnStarted(turn=1))  # seq 3, provisional: live
    end = channel.publish(1, stream_end=pb.StreamEnd())  # seq 4, durable: held until written
    assert (await agen.__anext__()).seq == 2
    third = await agen.__anext__()
    assert third.seq == 3 and third.provisional
    written = channel.take()
    storage.events.extend(written)
    channel.flushed(written, reserved=4)
    rest = [e async for e in agen]
    assert [e.seq for e in rest] == [4] and not rest[0].provisional and end.seq == 4


async def test_durable_events_wait_for_their_write_and_nothing_overtakes_them():
    """An event describing state is delivered only once the save that records it committed."""
    hub = EventHub(capacity=8)
    channel = hub.open("r", "t", "s", seq=0, session_seq=0, reserved=100)
    sub = hub.subscribe(run_topic("r"))
    channel.publish(1, turn_started=pb.TurnStarted(turn=1))  # 1, provisional: live
    channel.publish(1, model_responded=pb.ModelResponded())  # 2, durable: held
    channel.publish(1, tool_progressed=pb.ToolProgressed(text="x"))  # 3, provisional, behind 2
    assert (await sub.next(0))[0] == 1
    assert await sub.next(0) is None  # 2 is not written yet, and 3 may not overtake it
    written = channel.take()
    assert [e.seq for e in written] == [1, 2, 3]
    channel.flushed(written, reserved=600)
    assert [(await sub.next(0))[0] for _ in range(2)] == [2, 3]
    assert channel.delivered_unflushed() == []


async def test_provisional_events_past_the_reservation_wait_for_a_durable_extension():
    """A seq a subscriber may see is always below the durable mark another owner continues after."""
    hub = EventHub(capacity=8)
    granted: list[tuple[int, int]] = []

    async def extend(seq: int, session_seq: int) -> bool:
        granted.append((seq, session_seq))
        return True

    channel = hub.open("r", "t", "s", seq=5, session_seq=9, reserved=6, extend=extend)
    sub = hub.subscribe(run_topic("r"))
    channel.publish(1, model_delta=pb.ModelDelta(text="a"))  # 6: inside the reservation
    channel.publish(1, model_delta=pb.ModelDelta(text="b"))  # 7: past it, held
    assert (await sub.next(0))[0] == 6
    assert await sub.next(0) is None
    got = await sub.next(5)  # delivered once the extension is written
    assert got[0] == 7 and granted and granted[0][0] >= 7 and granted[0][1] == granted[0][0] + 4
    assert channel.reserved >= 7


async def test_dropped_events_are_filled_from_storage():
    hub = EventHub(capacity=1)
    storage = FakeStorage([])
    channel = hub.open("r", "t", "s", seq=0, session_seq=0, reserved=100)
    channel.publish(1, turn_started=pb.TurnStarted(turn=1))
    agen = follow(hub, run_topic("r"), storage.read, 0, poll_seconds=5)
    assert (await agen.__anext__()).seq == 1  # the follower is subscribed from here on
    for _ in range(3):
        channel.publish(1, turn_started=pb.TurnStarted(turn=1))  # 2 is buffered; 3 and 4 overflow
    channel.publish(1, stream_end=pb.StreamEnd())  # 5 is held until written, then overflows
    written = channel.take()
    storage.events.extend(written)
    channel.flushed(written, reserved=5)
    rest = [e async for e in agen]
    assert [e.seq for e in rest] == [2, 3, 4, 5]
    assert all(e.WhichOneof("payload") != "gap" for e in rest)


async def test_what_storage_cannot_fill_is_a_gap():
    hub = EventHub(capacity=8)
    storage = FakeStorage([stored(1), stored(4, kind="stream_end")])  # 2 and 3 are gone
    events = [e async for e in follow(hub, run_topic("r"), storage.read, 0, poll_seconds=5)]
    assert [e.WhichOneof("payload") for e in events] == ["turn_started", "gap", "stream_end"]
    gap = events[1].gap
    assert (gap.last_good, gap.dropped, gap.next) == (1, 2, 4) and events[1].seq == 1


async def test_cursor_ahead_of_the_timeline_resets():
    hub = EventHub()
    storage = FakeStorage([stored(1), stored(2, kind="stream_end")])
    events = [e async for e in follow(hub, run_topic("r"), storage.read, 99, poll_seconds=5)]
    assert events[0].gap.last_good == 0 and events[0].gap.dropped == 99 and events[0].gap.next == 1
    assert [e.seq for e in events[1:]] == [1, 2]


async def test_session_topic_uses_session_seqs():
    hub = EventHub()
    storage = FakeStorage([stored(7, session_seq=1), stored(8, session_seq=2)])

    async def read(after: int, upto: int | None) -> list[StoredEvent]:
        return [
            e for e in storage.events if e.session_seq > after and (upto is None or e.session_seq <= upto)
        ]

    agen = follow(hub, session_topic("t", "s"), read, 0, poll_seconds=5)
    events = await collect(agen, 2)
    assert [e.seq for e in events] == [1, 2]
    await agen.aclose()


async def test_a_cursor_inside_a_range_a_dead_owner_reserved_is_not_a_reset():
    """004 §2.11: a seq seen from a replica that died is never reused; the next event comes after a gap."""
    hub = EventHub()
    storage = FakeStorage([stored(1), stored(2)])  # the dead owner delivered up to 7, reserved 20

    async def head() -> int:
        return 20

    agen = follow(hub, run_topic("r"), storage.read, 7, poll_seconds=0.01, head=head)
    storage.events.append(stored(21))  # the new owner numbers after the reservation
    storage.events.append(stored(22, kind="stream_end"))
    events = [e async for e in agen]
    assert [e.WhichOneof("payload") for e in events] == ["gap", "turn_started", "stream_end"]
    assert (events[0].gap.last_good, events[0].gap.dropped, events[0].gap.next) == (7, 13, 21)
    # a cursor ahead of everything the timeline may have issued is still a reset, at once
    reset = follow(hub, run_topic("r"), storage.read, 99, poll_seconds=5, head=head)
    first = await reset.__anext__()
    assert (first.gap.last_good, first.gap.dropped, first.gap.next) == (0, 99, 1)
    await reset.aclose()


async def test_drops_nothing_can_refill_after_the_end_are_an_at_end_gap():
    hub = EventHub(capacity=1)
    storage = FakeStorage([])
    channel = hub.open("r", "t", "s", seq=0, session_seq=0, reserved=100)
    channel.publish(1, turn_started=pb.TurnStarted(turn=1))

    async def ended() -> bool:
        return True

    agen = follow(hub, run_topic("r"), storage.read, 0, poll_seconds=5, ended=ended)
    assert (await agen.__anext__()).seq == 1
    for _ in range(3):
        channel.publish(1, turn_started=pb.TurnStarted(turn=1))  # 2 buffered, 3 and 4 dropped
    hub.close(channel)  # the producer died here: 2..4 were never written
    assert (await agen.__anext__()).seq == 2
    last = await agen.__anext__()
    assert last.gap.at_end and last.gap.next == 0 and last.gap.last_good == 2 and last.gap.dropped == 2
    assert [e async for e in agen] == []


async def test_a_poke_ends_the_wait_without_a_timeout():
    sub = Subscription(run_topic("r"), capacity=4)
    sub.poke()
    assert await sub.next(None) is None  # storage has news: re-read, no wait at all
    sub.offer(1, ev(1))
    sub.poke()
    assert (await sub.next(None))[0] == 1  # buffered items first
    assert await sub.next(None) is None  # then the pending poke


async def test_a_stream_without_poll_follows_another_replicas_writes_on_wake():
    """poll_seconds=None: only a wake (a NOTIFY on PostgreSQL) makes the stream re-read."""
    hub = EventHub(capacity=8)
    storage = FakeStorage([stored(1)])
    agen = follow(hub, run_topic("r"), storage.read, 0, poll_seconds=None)
    assert (await agen.__anext__()).seq == 1
    storage.events += [stored(2), stored(3, kind="stream_end")]  # written by another replica
    hub.wake("other-run", "t", "other")  # another topic's news does not concern this stream
    hub.wake("r", "t", "s")
    assert [e.seq for e in await collect(agen, 2)] == [2, 3]


async def test_wake_all_pokes_every_topic():
    hub = EventHub(capacity=8)
    subs = [hub.subscribe(run_topic("a")), hub.subscribe(session_topic("t", "s"))]
    hub.wake_all()
    assert [await s.next(None) for s in subs] == [None, None]


def test_a_batch_is_cut_at_its_byte_bound_and_a_large_event_travels_alone():
    from agentrt.runs.events.stream import batched

    small = [pb.RunEvent(seq=i, turn_started=pb.TurnStarted(turn=1)) for i in range(1, 4)]
    big = pb.RunEvent(seq=4, model_delta=pb.ModelDelta(text="x" * 5000))
    parts = batched([*small, big, *small], max_bytes=1000)
    assert [[e.seq for e in p] for p in parts] == [[1, 2, 3], [4], [1, 2, 3]]
    assert batched(small[:1], max_bytes=1) == [small[:1]]
    assert sum(len(p) for p in batched(small * 100, max_bytes=64)) == 300
