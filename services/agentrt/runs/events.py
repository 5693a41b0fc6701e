"""In-process event fan-out: one producer per run, many subscribers (004 §2.11).

- A `Subscription` is one consumer's bounded buffer. `offer()` never blocks: when the
  buffer is full the event is dropped and the drop is remembered; the next event that
  fits is preceded by a `GapMarker` naming the dropped range, so a loss is never silent.
- `RunChannel` is the producer side of one executing run: it numbers events live (the
  run's seq and the session's seq), delivers them to subscribers of the run and of its
  session, and keeps them as *unflushed* until the next save point writes them to the
  database. Replay reads the database and the unflushed events together.
- `EventHub` holds the subscriptions by topic and the open channels.

Publishing is synchronous and never awaits, so seqs are assigned atomically with delivery
and a subscriber never sees a higher seq before a lower one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from agentrt.runs.records import StoredEvent
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

    async def next(self, timeout: float | None) -> tuple[int, pb.RunEvent] | GapMarker | None:
        """Return the next buffered item, waiting up to timeout seconds; None on timeout.

        When the buffer is drained and events were dropped since, the answer is a
        GapMarker with next = 0 ("events after last_good were dropped; none is buffered"),
        so a consumer learns of a loss even when no further event is ever published.
        """
        if not self._items and not self._gap_count:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                return None
        if self._items:
            return self._items.popleft()
        if self._gap_count:
            marker = GapMarker(self._gap_from, self._gap_count, 0)
            self._gap_count = 0
            return marker
        return None


@dataclass
class RunChannel:
    """The producer side of one executing run (see the module docstring)."""

    hub: EventHub
    run_id: str
    tenant: str
    session_id: str
    seq: int
    session_seq: int
    unflushed: list[StoredEvent] = field(default_factory=list)

    def publish(self, turn: int, **payload: object) -> StoredEvent:
        """Number, deliver and keep one event; payload is one RunEvent oneof field.

        Example: ``channel.publish(2, turn_started=pb.TurnStarted(turn=2))``.
        """
        stored = self.stage(turn, **payload)
        self.unflushed.append(stored)
        self.hub.deliver([stored])
        return stored

    def stage(self, turn: int, **payload: object) -> StoredEvent:
        """Number one event without delivering it.

        For events announcing a state a reader will act on (suspended, completed, stream
        end): the caller writes them with that state and delivers them after the commit,
        so a client that saw the event finds the state when it asks.
        """
        self.seq += 1
        self.session_seq += 1
        event = pb.RunEvent(seq=self.seq, run_id=self.run_id, turn=turn, **payload)  # type: ignore[arg-type]
        event.time.FromNanoseconds(time.time_ns())
        return StoredEvent(self.run_id, self.seq, self.tenant, self.session_id, self.session_seq, event)

    def take(self) -> list[StoredEvent]:
        """Return the events not yet written (the caller writes them at its save point)."""
        return list(self.unflushed)

    def flushed(self, events: list[StoredEvent]) -> None:
        """Forget events the save point committed."""
        done = {e.seq for e in events}
        self.unflushed = [e for e in self.unflushed if e.seq not in done]


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

    def open(self, run_id: str, tenant: str, session_id: str, seq: int, session_seq: int) -> RunChannel:
        """Open the channel of a run this process executes, numbering after the given seqs."""
        channel = RunChannel(self, run_id, tenant, session_id, seq, session_seq)
        self._channels[run_id] = channel
        return channel

    def close(self, channel: RunChannel) -> None:
        """Close a run's channel (its unflushed events are no longer replayable here)."""
        if self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]

    def unflushed(self, topic: Topic) -> list[StoredEvent]:
        """Return the unflushed events of a topic, from the channels open here."""
        kind, key = topic
        if kind == "run":
            channel = self._channels.get(key)
            return list(channel.unflushed) if channel else []
        out: list[StoredEvent] = []
        for channel in self._channels.values():
            if f"{channel.tenant}/{channel.session_id}" == key:
                out.extend(channel.unflushed)
        return out

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
