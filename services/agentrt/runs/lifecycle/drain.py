"""A runs replica's drain (SIGTERM): its runs stopped at their next wait and handed over.

`RunDrain` is the part of `RunManager` (runs/manager.py) that the process's drain calls
(runs/server.py; docs/operations.md "Draining"; decision 0054). One deadline,
AGENTRT_DRAIN_SECONDS from the moment the replica turns NOT_SERVING, bounds the whole drain:

1. `begin_drain` (the server's draining hook, before the in-flight RPCs' grace): no run is
   taken over any more (the housekeeping loop skips its passes), and every local run is
   asked to stop at its next wait ("shutdown"): a model call in flight is let finish, so
   its response is logged and never asked again; a run spawned later (a StartRun or
   ResumeRun still in flight) is asked as it is spawned.
2. `stop` (the close hook, once the RPCs drained): lets a StartRun or ResumeRun that the
   RPCs' grace cancelled after its lease-taking write spawn its run (bounded by
   HANDOVER_WAIT_S), then waits for the runs until the deadline.
   A run still waiting then (a model call that outlasts the drain) is cancelled; its
   executor writes what it delivered and releases the lease (runs/loop/executor.py), and
   the gateway finishes and journals the call for the next owner's repeat (decision
   0019). Only then do the lease renewals end, so no lease of a run this replica still
   drives lapses mid-drain.

Invariants: a run is never left with a live lease held by a replica that exited cleanly
(another replica continues it at its next takeover pass, not after the lease expires);
while a run of this replica acts, its lease is renewed, so no other replica takes it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.runs.loop.deps import Deps
    from agentrt.runs.loop.executor import RunExecutor

log = logging.getLogger("agentrt.runs")

#: How long `stop` waits for the runs it cancelled at the drain's deadline to hand over
#: (a fenced write of their delivered events and the lease's release), in seconds.
HANDOVER_WAIT_S = 5.0


class RunDrain:
    """`begin_drain` and `stop`; mixed into RunManager (see the module docstring)."""

    deps: Deps
    _executors: dict[str, tuple[RunExecutor, asyncio.Task[None]]]
    #: The lease renewals and the housekeeping (RunManager._lease_loop).
    _loop_task: asyncio.Task[None] | None
    #: Monotonic deadline of the drain once `begin_drain` ran (None: not draining).
    _drain_deadline: float | None
    #: StartRun/ResumeRun writes that take a lease, and their spawn (RunManager.unabandoned).
    _pending_spawns: set[asyncio.Future[Any]]

    @property
    def draining(self) -> bool:
        """True once the drain began."""
        return self._drain_deadline is not None

    async def begin_drain(self, grace_s: float) -> None:
        """Begin the drain: take no run over, and ask every local run to stop at its next wait.

        Args:
            grace_s: the drain's length, seconds (AGENTRT_DRAIN_SECONDS), counted from now;
                `stop` waits for the runs until then. A second call changes nothing.
        """
        if self._drain_deadline is not None:
            return
        self._drain_deadline = time.monotonic() + grace_s
        for executor, _ in list(self._executors.values()):
            executor.stop("shutdown")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop every local run at its next wait and release its lease; then end the renewals.

        Begins the drain first when `begin_drain` was not called (grace_s seconds from now),
        waits for the runs until its deadline, cancels the late ones and waits up to
        HANDOVER_WAIT_S seconds for them to hand over (module docstring). The runs stay
        RUNNING; another replica (or this one restarted) continues them from their log.
        Never raises for a run: a run that did not hand over in time is logged and left to
        its lease's expiry.
        """
        await self.begin_drain(grace_s)
        deadline = self._drain_deadline or time.monotonic()
        if self._pending_spawns:
            # A StartRun/ResumeRun cancelled by the RPCs' grace after its lease-taking write:
            # its spawn still comes (RunManager.unabandoned), and its executor, asked to stop
            # as it is spawned, must be among those waited for below.
            _, late_spawns = await asyncio.wait(list(self._pending_spawns), timeout=HANDOVER_WAIT_S)
            if late_spawns:
                log.warning(
                    "runs: %d start(s) did not record within %.0fs", len(late_spawns), HANDOVER_WAIT_S
                )
        tasks = [t for _, t in self._executors.values()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
            for task in late:
                task.cancel()
            if late:
                _, stuck = await asyncio.wait(late, timeout=HANDOVER_WAIT_S)
                if stuck:
                    log.warning("runs: %d run(s) did not hand over within %.0fs", len(stuck), HANDOVER_WAIT_S)
        if self._loop_task is not None:  # the renewals end with it, once no run of ours acts
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await self.deps.releases.drain(grace_s)  # the sandboxes of runs that just ended
