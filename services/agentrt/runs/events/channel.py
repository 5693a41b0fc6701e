"""The producer side of one executing run: its events numbered and released when durable (004 §2.11).

`RunChannel` numbers a run's events (the run's seq and the session's seq) and decides when
each may reach a subscriber (through its `EventHub`, runs/events/hub.py):
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
from typing import TYPE_CHECKING

from agentrt.runs.domain import StoredEvent
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

if TYPE_CHECKING:
    from agentrt.runs.events.hub import EventHub

log = logging.getLogger("agentrt.runs")

#: Seqs a save point reserves past its last event for the provisional events that follow.
RESERVE_BLOCK = 512
#: Payload kinds delivered before their save point (see the module docstring).
PROVISIONAL = frozenset({"turn_started", "model_delta", "tool_progressed", "tool_returned"})
#: Writes (run seq, session seq) as the run's durable reservation; False = lease lost.
Extender = Callable[[int, int], Awaitable[bool]]


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
