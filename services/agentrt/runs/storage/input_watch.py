"""What a runs process knows of its runs' input queues between reads (decision 0060).

A tool turn's batch carries the injected input it consumes, so before writing it the loop
needs the run's queue (`RunStore.pending_input`): on PostgreSQL a round trip per turn, for a
queue that is almost always as the previous save point left it. `InputWatch` tells the loop
when it may use the queue it already knows instead of reading it again.

What it owns, per process: for each run an executor drives here (`track`/`untrack`), a count
of the pushes this process has heard of (`pushed`): its own InjectInput/StopAfterTurn after
their commit (RunStore.push_input), and every other replica's through the NOTIFY each push
sends at its commit, which the runs process's LISTEN connection delivers
(runs/events/notify.py); whether that connection is up (`listening`); an epoch that moves
whenever it went down or came back (a push may have been missed in between).

How the loop uses it: `mark(run_id)` before it reads the queue; later, `unchanged(run_id,
mark)` is True only while the connection has stayed up, no push has been heard of since the
mark, and the mark is younger than `TRUST_S`. Then the queue it read, less what its own save
points consumed, is still the queue. Anything else (SQLite, where no one is listening; a run
not tracked; a lost connection; a push; an old mark) answers False, and the loop reads.

Invariant: input accepted on the replica that drives the run reaches the batch of its turn, as
before; input accepted on another replica reaches the first batch that starts after its
notification arrived, and never one that starts more than `TRUST_S` after it was accepted
(even if the notification is lost: a connection that died without a sign). With turns of a
few milliseconds that can be several turns later. Input is never lost: it stays queued until
a batch consumes it or the run's end reports it (decision 0058).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: How long a read queue may stand in for another read, seconds: the most input accepted on
#: another replica can be late by, whether its notification is slow or never arrives (a
#: breaker measured input two and more millisecond turns late with notifications on time).
#: Turns longer than this (a real model's) read every time; the saving is for turns that
#: take milliseconds, which read about once per this interval.
TRUST_S = 0.1


@dataclass(frozen=True)
class Mark:
    """What the watch knew of a run when the loop read its queue."""

    epoch: int
    pushes: int
    at: float


class InputWatch:
    """The pushes a runs process has heard of (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pushes: dict[str, int] = {}
        self._epoch = 0
        #: True while this process hears every push's notification (its LISTEN is up).
        self.listening = False

    def track(self, run_id: str) -> None:
        """Start counting pushes to run_id (an executor drives it here)."""
        self._pushes.setdefault(run_id, 0)

    def untrack(self, run_id: str) -> None:
        """Stop counting pushes to run_id (its executor stopped)."""
        self._pushes.pop(run_id, None)

    def pushed(self, run_id: str) -> None:
        """Note that input was queued on run_id (committed)."""
        if run_id in self._pushes:
            self._pushes[run_id] += 1

    def lost(self) -> None:
        """The notifications stopped: nothing known stands in for a read until `heard_again`."""
        self.listening = False
        self._epoch += 1

    def heard_again(self) -> None:
        """The notifications are delivered again (LISTEN in place); marks from before are void."""
        self._epoch += 1
        self.listening = True

    def mark(self, run_id: str) -> Mark:
        """What is known of run_id now; take it before reading the queue."""
        return Mark(self._epoch, self._pushes.get(run_id, -1), self._clock())

    def unchanged(self, run_id: str, mark: Mark) -> bool:
        """True when run_id's queue cannot have gained input since `mark` (see the module docstring)."""
        return (
            self.listening
            and mark.pushes >= 0
            and self._pushes.get(run_id, -1) == mark.pushes
            and mark.epoch == self._epoch
            and self._clock() - mark.at < TRUST_S
        )
