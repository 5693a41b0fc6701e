"""Following a run's (or a session's) events from a cursor (004 §2.11, StreamRunEvents).

`follow()` yields every event with seq > after_seq, in seq order, then live ones:

1. It subscribes first, then replays the stored events (database + this process's
   unflushed ones), so nothing published in between is missed; duplicates are skipped by
   seq. Registration happens before the replay read, which makes them one atomic step.
2. Live events come from the subscription. A hole in the seqs (a drop from the bounded
   buffer, or events another replica wrote) is filled from storage; what storage cannot
   fill is reported as an `EventGap`, never skipped silently.
3. It re-reads storage when the hub wakes the subscription (on PostgreSQL, a NOTIFY from
   the replica that wrote events: runs/events/notify.py) and, when `poll_seconds` is not None,
   after that long idle (SQLite, where a second process on the same file sends no wake).
4. A cursor ahead of every seq the timeline may have issued (`head`: the stored events
   and the owner's durable reservation; a cursor from an earlier life of the timeline)
   is a reset, answered at once: an EventGap with last_good 0, the stale cursor as
   `dropped`, then the timeline from 1. A cursor inside a range a dead replica reserved
   and never wrote (it may have delivered provisional events there) is not a reset: the
   next stored event arrives after a gap naming the range.
5. Drops the subscription reports (GapMarker) that storage cannot refill once the run has
   ended are reported as an `at_end` gap (next 0) and the stream ends: nothing more will
   come to carry them.

A run stream ends after `stream_end`; a session stream follows until the caller leaves.
A gap event carries seq = last_good, so resubscribing from the last seq seen resyncs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from agentrt.runs.domain import StoredEvent
from agentrt.runs.events.build import gap_event
from agentrt.runs.events.hub import EventHub, GapMarker, Topic, as_session_event
from agentrt.v1 import run_service_pb2 as pb

#: Reads stored events of the topic with after < seq <= upto (upto None = no bound).
Reader = Callable[[int, int | None], Awaitable[list[StoredEvent]]]
#: The highest seq the topic may have issued (stored, or reserved by its owner).
Head = Callable[[], Awaitable[int]]
#: True once the topic's producer has ended for good (a run that finished).
Ended = Callable[[], Awaitable[bool]]


#: (seq in the topic's timeline, the event as the topic carries it)
Item = tuple[int, pb.RunEvent]
#: Bytes of events one StreamRunEvents message carries at most with batch_events (a single
#: larger event still travels, alone): well under the 4 MiB a gRPC client accepts by default.
MAX_BATCH_BYTES = 1 << 20


def batched(events: list[pb.RunEvent], max_bytes: int = MAX_BATCH_BYTES) -> list[list[pb.RunEvent]]:
    """Split events, in order, into runs of at most max_bytes serialized (each run non-empty)."""
    if len(events) == 1:
        return [events]
    parts: list[list[pb.RunEvent]] = []
    size = 0
    for event in events:
        n = event.ByteSize()
        if parts and size + n <= max_bytes:
            parts[-1].append(event)
            size += n
        else:
            parts.append([event])
            size = n
    return parts


def _items(topic: Topic, stored: list[StoredEvent]) -> list[Item]:
    if topic[0] == "run":
        return [(e.seq, e.event) for e in stored]
    return [(e.session_seq, as_session_event(e)) for e in stored]


async def _zero() -> int:
    return 0


async def _never() -> bool:
    return False


async def follow(
    hub: EventHub,
    topic: Topic,
    read: Reader,
    after_seq: int,
    *,
    poll_seconds: float | None = 1.0,
    head: Head = _zero,
    ended: Ended = _never,
) -> AsyncIterator[pb.RunEvent]:
    """Yield the topic's events after after_seq, one at a time (see `follow_batches`)."""
    batches = follow_batches(hub, topic, read, after_seq, poll_seconds=poll_seconds, head=head, ended=ended)
    async for batch in batches:
        for event in batch:
            yield event


async def follow_batches(
    hub: EventHub,
    topic: Topic,
    read: Reader,
    after_seq: int,
    *,
    poll_seconds: float | None = 1.0,
    head: Head = _zero,
    ended: Ended = _never,
) -> AsyncIterator[list[pb.RunEvent]]:
    """Yield the topic's events after after_seq, in batches (see the module docstring).

    A batch is what is at hand at once: a replay's read, or the live events a publisher's
    burst buffered together (`Subscription.consecutive`), with the gap events among them.

    Args:
        hub: the process's event hub.
        topic: a run or session topic.
        read: the storage reader of that topic.
        after_seq: deliver events with a greater seq (>= 0).
        poll_seconds: longest wait before re-reading storage, in seconds (None: wait for
            a wake-up or a live event only).
        head: the highest seq the topic may have issued (0: what is stored is all).
        ended: whether the topic's producer has ended for good.

    Yields:
        Non-empty lists of RunEvents, in seq order across lists; EventGap events where
        events cannot be delivered. For a run topic the iteration ends after the batch
        holding the stream_end event.
    """
    sub = hub.subscribe(topic)
    is_run = topic[0] == "run"
    run_id = topic[1] if is_run else ""

    async def replay(after: int, upto: int | None) -> list[Item]:
        # Unwritten events first, then the database: an event written in between is in the
        # database by the time it is read, so the union never has a hole. (Reading the
        # database first could miss an event flushed between the two reads.)
        unwritten = _items(topic, hub.unflushed(topic))
        merged = dict(_items(topic, await read(after, upto)))
        for seq, event in unwritten:
            if seq > after and (upto is None or seq <= upto):
                merged.setdefault(seq, event)
        return sorted(merged.items(), key=lambda kv: kv[0])

    cursor = after_seq
    out: list[pb.RunEvent] = []
    try:
        batch = await replay(cursor, None)
        if cursor > 0 and not batch:
            at_cursor = await replay(cursor - 1, cursor)
            if not at_cursor and cursor > await head():
                # The cursor is ahead of the whole timeline: a reset, not a continuation.
                out.append(gap_event(0, cursor, 1, run_id))
                cursor = 0
                batch = await replay(cursor, None)
            elif at_cursor and is_run and at_cursor[0][1].WhichOneof("payload") == "stream_end":
                return  # the caller has seen the end already
        while True:
            for seq, event in batch:
                if seq <= cursor:
                    continue
                if seq > cursor + 1:
                    out.append(gap_event(cursor, seq - cursor - 1, seq, run_id))
                out.append(event)
                cursor = seq
                if is_run and event.WhichOneof("payload") == "stream_end":
                    yield out
                    return
            if out:
                yield out
                out = []
            item = await sub.next(poll_seconds)
            if item is None:
                batch = await replay(cursor, None)
            elif isinstance(item, GapMarker):
                batch = await replay(cursor, item.next - 1 if item.next else None)
                if not batch and not item.next and is_run and not hub.is_open(run_id) and await ended():
                    # Dropped, not in storage, and nothing will ever follow to carry it.
                    yield [gap_event(cursor, item.dropped, 0, run_id, at_end=True)]
                    return
            elif item[0] > cursor + 1:
                batch = [*(await replay(cursor, item[0] - 1)), item, *sub.consecutive(item[0])]
            else:
                batch = [item, *sub.consecutive(item[0])]
    finally:
        hub.unsubscribe(sub)
