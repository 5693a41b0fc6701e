"""In-process event fan-out: one producer per run, many subscribers (004 §2.11).

- A `Subscription` is one consumer's bounded buffer. `offer()` never blocks: when the
  buffer is full the event is dropped and the drop is remembered; the next event that
  fits is preceded by a `GapMarker` naming the dropped range, so a loss is never silent.
- `RunChannel` is the producer side of one executing run: it numbers events (the run's
  seq and the session's seq) and decides when each may reach a subscriber:
  * a durable event (everything but the provisional kinds) is *held* until the save point
    that writes it has committed, so a subscriber that received it finds it in the run
    log (nothing is shown before it is durable);
  * a provisional event (turn_started, planning, model_delta, tool_progressed,
    tool_returned; `RunEvent.provisional`) is delivered at once, but only while its seq is
    at most the run's *reservation*: the highest seq the run row says may have been
    delivered. Every save point moves the reservation RESERVE_BLOCK ahead of the last
    seq; a channel that runs out of it mid-turn asks for more (`extend`, one fenced write)
    and holds its provisional events until the write commits. A replica that takes a run
    over numbers after the reservation, so a seq a subscriber has seen is never given to
    a different event; what the dead replica delivered and never wrote is a gap.
  Held events go out in seq order after the write, and nothing numbered later overtakes
  them. Numbered events stay *unflushed* until a save writes them; replay reads the
  database and the unflushed events that were already delivered.
- `EventHub` holds the subscriptions by topic and the open channels. `wake()` tells the
  subscribers of a topic that storage holds events they have not been offered (another
  replica wrote them; runs/notify.py hears of it): their next wait returns at once and the
  stream re-reads storage.

- `guardrail_result` builds the payload of a consulted guardrail's event (004 §2.6) from its
  `core.guardrails.Result`.

Publishing is synchronous and never awaits, so seqs are assigned atomically with delivery
and a subscriber never sees a higher seq before a lower one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentrt.core.guardrails import Result
from agentrt.mesh.waits import wait_event
from agentrt.runs.storage.records import RunRecord, StoredEvent
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

log = logging.getLogger("agentrt.runs")

#: A topic is ("run", run_id) or ("session", "<tenant>/<session_id>").
Topic = tuple[str, str]
#: Seqs a save point reserves past its last event for the provisional events that follow.
RESERVE_BLOCK = 512
#: Payload kinds delivered before their save point (see the module docstring).
PROVISIONAL = frozenset({"turn_started", "model_delta", "tool_progressed", "tool_returned"})
#: Writes (run seq, session seq) as the run's durable reservation; False = lease lost.
Extender = Callable[[int, int], Awaitable[bool]]


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


@dataclass
class RunChannel:
    """The producer side of one executing run (see the module docstring).

    Attributes:
        seq / session_seq: the last numbers given (run timeline, session timeline).
        reserved: the durable reservation: provisional events up to this run seq may be
            delivered before their save point.
        extend: writes a larger reservation (None: provisional events wait for the next save).
    """

    hub: EventHub
    run_id: str
    tenant: str
    session_id: str
    seq: int
    session_seq: int
    reserved: int = 0
    extend: Extender | None = None
    unflushed: list[StoredEvent] = field(default_factory=list)
    _held: deque[StoredEvent] = field(default_factory=deque)
    _stored_upto: int = 0
    _extending: asyncio.Task[None] | None = None

    def publish(self, turn: int, **payload: object) -> StoredEvent:
        """Number one event; deliver it now (provisional, within the reservation) or hold it.

        payload is one RunEvent oneof field, e.g.
        ``channel.publish(2, turn_started=pb.TurnStarted(turn=2))``. Whether the event is
        provisional follows from its kind (PROVISIONAL), and a planning phase change is
        provisional too (it opens a turn like turn_started).
        """
        kind = next(iter(payload))
        phase = payload.get("phase_changed")
        provisional = kind in PROVISIONAL or (
            isinstance(phase, pb.PhaseChanged) and phase.phase == cpb.RUN_PHASE_PLANNING
        )
        self.seq += 1
        self.session_seq += 1
        event = pb.RunEvent(
            seq=self.seq,
            run_id=self.run_id,
            turn=turn,
            provisional=provisional,
            **payload,  # type: ignore[arg-type]
        )
        event.time.FromNanoseconds(time.time_ns())
        stored = StoredEvent(self.run_id, self.seq, self.tenant, self.session_id, self.session_seq, event)
        self.unflushed.append(stored)
        if provisional and not self._held and stored.seq <= self.reserved:
            self.hub.deliver([stored])
        else:
            self._held.append(stored)
            if provisional:
                self._ask_for_more()
        return stored

    def take(self) -> list[StoredEvent]:
        """Return the events not yet written (the caller writes them at its save point)."""
        return list(self.unflushed)

    def reservation(self, block: int = RESERVE_BLOCK) -> tuple[int, int]:
        """Return the (run seq, session seq) reservation a save point writes: `block` ahead."""
        return self.seq + block, self.session_seq + block

    def flushed(self, events: list[StoredEvent], reserved: int) -> None:
        """Record a committed save: its events are stored and `reserved` is durable.

        Held events then go out in order: stored ones, and provisional ones within the
        reservation; the first that is neither stops the release.
        """
        done = {e.seq for e in events}
        self.unflushed = [e for e in self.unflushed if e.seq not in done]
        if events:
            self._stored_upto = max(self._stored_upto, max(done))
        self.reserved = max(self.reserved, reserved)
        self._release()

    def delivered_unflushed(self) -> list[StoredEvent]:
        """Return the unwritten events subscribers already have (held ones excluded)."""
        held = {e.seq for e in self._held}
        return [e for e in self.unflushed if e.seq not in held]

    def close(self) -> None:
        """Stop asking for reservations (the executor ended)."""
        if self._extending is not None:
            self._extending.cancel()

    def _release(self) -> None:
        out: list[StoredEvent] = []
        while self._held:
            head = self._held[0]
            if head.seq <= self._stored_upto or (head.event.provisional and head.seq <= self.reserved):
                out.append(self._held.popleft())
            else:
                break
        if out:
            self.hub.deliver(out)
        if self._held and self._held[0].event.provisional:
            self._ask_for_more()

    def _ask_for_more(self) -> None:
        if self.extend is None or self._extending is not None:
            return
        try:
            self._extending = asyncio.get_running_loop().create_task(self._extend())
        except RuntimeError:  # no loop (a unit test driving the channel synchronously)
            self._extending = None

    async def _extend(self) -> None:
        assert self.extend is not None
        target, session_target = self.reservation()
        try:
            ok = await self.extend(target, session_target)
        except Exception:  # noqa: BLE001 - the events wait for the next save point instead
            log.warning("run %s: could not extend the event reservation", self.run_id, exc_info=True)
            ok = False
        self._extending = None
        if ok:
            self.reserved = max(self.reserved, target)
            self._release()


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


def run_started_events(record: RunRecord) -> list[pb.RunEvent]:
    """Return a new run's first events (`run_started`, phase `prompted`), stamped now (002 RunStarted)."""
    snap = record.agent
    started = pb.RunEvent(
        run_id=record.run_id,
        run_started=pb.RunStarted(
            agent_name=snap.name, session_id=record.session_id, input=record.input, model=snap.model
        ),
    )
    prompted = pb.RunEvent(run_id=record.run_id, phase_changed=pb.PhaseChanged(phase=cpb.RUN_PHASE_PROMPTED))
    for ev in (started, prompted):
        ev.time.FromNanoseconds(time.time_ns())
    return [started, prompted]


def child_run_linked(call_id: str, child: RunRecord) -> pb.ChildRunLinked:
    """Return the payload of a parent's `child_run_linked` event (002 run tree; 004 §2.8).

    Durable (not in PROVISIONAL): it reaches a subscriber only once the parent's log holds the link.
    """
    return pb.ChildRunLinked(
        call_id=call_id,
        child_run_id=child.run_id,
        agent_name=child.agent_name,
        agent_version=child.agent_version,
        session_id=child.session_id,
    )


_STAGES = {
    "input": pb.GUARDRAIL_STAGE_INPUT,
    "output": pb.GUARDRAIL_STAGE_OUTPUT,
    "tool_input": pb.GUARDRAIL_STAGE_TOOL_INPUT,
    "tool_output": pb.GUARDRAIL_STAGE_TOOL_OUTPUT,
}
_DECISIONS = {
    "allow": pb.GUARDRAIL_DECISION_ALLOW,
    "replace": pb.GUARDRAIL_DECISION_REPLACE,
    "trip": pb.GUARDRAIL_DECISION_TRIP,
}


def guardrail_result(result: Result, duration_s: float, usage: cpb.Usage | None = None) -> pb.GuardrailResult:
    """Return the `guardrail_result` event payload of one consulted guardrail (004 §2.6).

    Args:
        result: the guardrail's outcome (core.guardrails); no decision = it failed or was
            cancelled (its `error` says which).
        duration_s: wall time it took, in seconds (>= 0).
        usage: a model guardrail's tokens (nested usage, 004 §2.7f); None for a pattern.
    """
    out = pb.GuardrailResult(
        guardrail=result.guardrail,
        stage=_STAGES[str(result.stage)],  # type: ignore[arg-type]
        decision=_DECISIONS[str(result.decision)] if result.decision else 0,  # type: ignore[arg-type]
        message=result.message,
        call_id=result.call_id,
        error=result.error,
        scope=result.scope,
    )
    out.duration.FromNanoseconds(int(max(0.0, duration_s) * 1e9))
    if usage is not None and usage.ByteSize():
        out.usage.CopyFrom(usage)
    return out
