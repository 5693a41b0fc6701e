"""In-process event fan-out: one producer per run, many subscribers (004 §2.11).

- A `Subscription` is one consumer's bounded buffer. `offer()` never blocks: when the
  buffer is full the event is dropped and the drop is remembered; the next event that
  fits is preceded by a `GapMarker` naming the dropped range, so a loss is never silent.
- `EventHub` holds the subscriptions by topic and the channels of the runs executing in
  this process (runs/events/channel.py: a run's producer side, which numbers its events and
  decides when each may reach a subscriber). `wake()` tells the subscribers of a topic
  that storage holds events they have not been offered (another replica wrote them;
  runs/events/notify.py hears of it): their next wait returns at once and the stream
  re-reads storage.

Delivery is synchronous and never awaits, so a subscriber never sees a higher seq before a
lower one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from agentrt.mesh.waits import wait_event
from agentrt.runs.domain import StoredEvent
from agentrt.runs.events.channel import Extender, RunChannel
from agentrt.v1 import run_service_pb2 as pb

#: A topic is ("run", run_id) or ("session", "<tenant>/<session_id>").
Topic = tuple[str, str]


def run_topic(run_id: str) -> Topic:
    """Return the topic of one run's events."""
    return ("run", run_id)


def session_topic(tenant: str, session_id: str) -> Topic:
    """Return the topic of every event of a session's runs."""
    return ("session", f"{tenant}/{session_id}")


@dataclass(frozen=True)
class GapMarker:
    """Events after last_good were dropped from this subscriber's buffer.

    They run up to next-1, or, when next is 0, up to whatever was published since
    (nothing is buffered then).
    """

    last_good: int
    dropped: int
    next: int


class Subscription:
    """One consumer's bounded buffer of (seq, event) and gap markers."""

    def __init__(self, topic: Topic, capacity: int) -> None:
        """Create an empty buffer holding at most `capacity` events (>= 1)."""
        self.topic = topic
        self._capacity = max(1, capacity)
        self._items: deque[tuple[int, pb.RunEvent] | GapMarker] = deque()
        self._wake = asyncio.Event()
        self._last_offered = 0
        self._gap_from = 0
        self._gap_count = 0
        self._stale = False

    def poke(self) -> None:
        """Storage holds events this buffer was not offered: make the next wait return None."""
        self._stale = True
        self._wake.set()

    def offer(self, seq: int, event: pb.RunEvent) -> None:
        """Buffer the event, or drop it and remember the drop; never blocks."""
        if len(self._items) >= self._capacity:
            if self._gap_count == 0:
                self._gap_from = self._last_offered
            self._gap_count += 1
            self._last_offered = seq
            self._wake.set()
            return
        if self._gap_count:
            self._items.append(GapMarker(self._gap_from, self._gap_count, seq))
            self._gap_count = 0
        self._items.append((seq, event))
        self._last_offered = seq
        self._wake.set()

    def consecutive(self, seq: int) -> list[tuple[int, pb.RunEvent]]:
        """Pop the buffered events that follow `seq` without a hole, in order; never waits.

        Stops at the first item that does not continue the run of seqs (a GapMarker, a
        hole): `next` returns it. What a publisher's burst buffered is one answer.
        """
        out: list[tuple[int, pb.RunEvent]] = []
        while self._items:
            head = self._items[0]
            if isinstance(head, GapMarker) or head[0] != seq + 1:
                break
            out.append(head)
            self._items.popleft()
            seq = head[0]
        return out

    async def next(self, timeout: float | None) -> tuple[int, pb.RunEvent] | GapMarker | None:
        """Return the next buffered item, waiting up to timeout seconds (None: no bound).

        Returns None on timeout, or once the buffer is drained after a `poke()`: the
        consumer re-reads storage then.

        When the buffer is drained and events were dropped since, the answer is a
        GapMarker with next = 0 ("events after last_good were dropped; none is buffered"),
        so a consumer learns of a loss even when no further event is ever published.
        """
        if not self._items and not self._gap_count:
            if self._stale:
                self._stale = False
                return None
            self._wake.clear()
            if not await wait_event(self._wake, timeout):
                return None
        if self._items:
            return self._items.popleft()
        if self._gap_count:
            marker = GapMarker(self._gap_from, self._gap_count, 0)
            self._gap_count = 0
            return marker
        self._stale = False
        return None


class EventHub:
    """Subscriptions by topic and the channels of runs executing in this process."""

    def __init__(self, capacity: int = 1024) -> None:
        """Create a hub whose subscriptions buffer `capacity` events each."""
        self._capacity = capacity
        self._subs: dict[Topic, set[Subscription]] = {}
        self._channels: dict[str, RunChannel] = {}

    def subscribe(self, topic: Topic, capacity: int | None = None) -> Subscription:
        """Register a subscription; events published from now on reach it."""
        sub = Subscription(topic, capacity or self._capacity)
        self._subs.setdefault(topic, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Remove a subscription."""
        subs = self._subs.get(sub.topic)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.topic]

    def open(
        self,
        run_id: str,
        tenant: str,
        session_id: str,
        seq: int,
        session_seq: int,
        *,
        reserved: int = 0,
        extend: Extender | None = None,
    ) -> RunChannel:
        """Open the channel of a run this process executes, numbering after the given seqs.

        Args:
            run_id: the run.
            tenant: its tenant.
            session_id: its session.
            seq: the last number given in the run's timeline (stored or reserved by an
                earlier owner).
            session_seq: the same in the session's timeline.
            reserved: the run's durable reservation (provisional events up to it may go out).
            extend: writes a larger reservation.
        """
        channel = RunChannel(
            self, run_id, tenant, session_id, seq, session_seq, reserved=max(reserved, seq), extend=extend
        )
        channel._stored_upto = seq
        self._channels[run_id] = channel
        return channel

    def close(self, channel: RunChannel) -> None:
        """Close a run's channel (its unflushed events are no longer replayable here)."""
        channel.close()
        if self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]

    def is_open(self, run_id: str) -> bool:
        """True while this process executes the run."""
        return run_id in self._channels

    def unflushed(self, topic: Topic) -> list[StoredEvent]:
        """Return the delivered but unwritten events of a topic, from the channels open here."""
        kind, key = topic
        if kind == "run":
            channel = self._channels.get(key)
            return channel.delivered_unflushed() if channel else []
        out: list[StoredEvent] = []
        for channel in self._channels.values():
            if f"{channel.tenant}/{channel.session_id}" == key:
                out.extend(channel.delivered_unflushed())
        return out

    def wake(self, run_id: str, tenant: str, session_id: str) -> None:
        """Poke the subscribers of the run's and its session's topics (events are in storage)."""
        for topic in (run_topic(run_id), session_topic(tenant, session_id)):
            for sub in list(self._subs.get(topic, ())):
                sub.poke()

    def wake_all(self) -> None:
        """Poke every subscriber (notifications may have been missed: all re-read storage)."""
        for subs in list(self._subs.values()):
            for sub in list(subs):
                sub.poke()

    def deliver(self, events: list[StoredEvent]) -> None:
        """Offer events to the subscribers of their run and session topics; never blocks."""
        for stored in events:
            for sub in list(self._subs.get(run_topic(stored.run_id), ())):
                sub.offer(stored.seq, stored.event)
            session_subs = self._subs.get(session_topic(stored.tenant, stored.session_id))
            if session_subs:
                event = as_session_event(stored)
                for sub in list(session_subs):
                    sub.offer(stored.session_seq, event)


def as_session_event(stored: StoredEvent) -> pb.RunEvent:
    """Return the event as a session stream carries it: its seq is the session's."""
    event = pb.RunEvent()
    event.CopyFrom(stored.event)
    event.seq = stored.session_seq
    return event
