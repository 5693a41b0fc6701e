"""Wake-ups for waits on task changes made in this process.

A wait (GetTask's, WatchTasks') re-reads the store whenever `changed()` is called here,
and at least every poll interval otherwise, which is how it sees changes made by another
replica. The hub carries no data: the store is the only source of truth.
"""

from __future__ import annotations

import asyncio

from agentrt.mesh.waits import wait_event


class Hub:
    """One event, replaced on every change (see the module docstring)."""

    def __init__(self) -> None:
        """Start with nothing changed."""
        self._event = asyncio.Event()

    def changed(self) -> None:
        """Wake every current waiter."""
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, timeout_s: float) -> None:
        """Return at the next change, or after timeout_s seconds, whichever is first."""
        await wait_event(self._event, timeout_s)
