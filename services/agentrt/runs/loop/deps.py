"""What every executor of this process shares (`Deps`), and the crash points of the crash tests.

`Deps` is built once per process (runs/server.py) and handed to the manager and every run's
executor (runs/loop/executor.py): the store, the peers, the event hub, this replica's name
and lease length, the run metrics, the sandbox releases in flight, the manager's side of
agent tools. `crash_at` turns `RunsConfig.crash_points` into the hook every executor calls
at each of CRASH_POINTS (a no-op unless a crash test named the point).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrt.mesh.telemetry.metrics import RunMetrics
from agentrt.runs.events.hub import EventHub
from agentrt.runs.lifecycle import sandboxes
from agentrt.runs.peers.client import Peers
from agentrt.runs.storage.store import RunStore

log = logging.getLogger("agentrt.runs")


#: Points at which a crash test may have the process kill itself (RunsConfig.crash_points):
#: right after the save that records a model response; after a turn's session batch is
#: written and before the save point records it; after a compaction summary is logged and
#: before its checkpoint is appended; after a guardrail's tripwire is recorded and before
#: the run's failure is; after a child run was resumed by ResumeRun and before its parent's
#: view of it is refreshed (agents as tools: the lease loop repairs the parent).
CRASH_POINTS = (
    "after_model_responded",
    "after_session_write",
    "after_compaction_summary",
    "after_child_resumed",
    "after_guardrail_tripped",
)


def _no_crash(point: str) -> None:
    return None


def crash_at(points: tuple[str, ...]) -> Callable[[str], None]:
    """Return the crash hook of a process: SIGKILL itself at the named points (none: a no-op).

    Raises:
        ValueError: a point that is not one of CRASH_POINTS.
    """
    unknown = set(points) - set(CRASH_POINTS)
    if unknown:
        raise ValueError(f"unknown crash point(s) {sorted(unknown)}; known: {', '.join(CRASH_POINTS)}")
    if not points:
        return _no_crash

    def crash(point: str) -> None:
        if point in points:
            log.warning("crash point %s reached: killing this process (SIGKILL)", point)
            os.kill(os.getpid(), signal.SIGKILL)

    return crash


@dataclass
class Deps:
    """What every executor shares: storage, peers, the event hub and run-level settings.

    `crash` is called at each of CRASH_POINTS (a no-op unless a crash test asked for it);
    `metrics` are the replica's run series (its server's registry; a private one by default);
    `children` is the manager's side of agent tools (runs/loop/phases/child.py ChildHost: spawn a
    child run here, cancel one), set by the RunManager.
    """

    store: RunStore
    peers: Peers
    hub: EventHub
    owner: str
    lease_seconds: float
    crash: Callable[[str], None] = _no_crash
    metrics: RunMetrics = field(default_factory=RunMetrics)
    #: Sandboxes of ended runs whose release failed; the manager retries them (runs/lifecycle/sandboxes.py).
    releases: sandboxes.Releases = field(default_factory=sandboxes.Releases)
    children: Any = None
    #: A run's turn calls go over its streams of calls (runs/peers/streams.py).
    peer_streams: bool = True
