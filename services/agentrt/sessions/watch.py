"""In-process wake-ups for WatchSession tails.

A `Notifier` lets a watcher sleep until a writer in the same process commits to the
session it tails. It is a hint, never the source of truth: a watcher always re-reads the
database after waking, and also wakes on a bounded poll interval, so appends made by
another replica (which this process cannot hear) still arrive within that bound.

Invariant: a watcher subscribes BEFORE it reads, so a commit that lands between its read
and its wait still wakes it (no lost wake-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

Key = tuple[str, str]


class Notifier:
    """Per-session wake-up events for watchers in this process."""

    def __init__(self) -> None:
        """Create a notifier with no subscribers."""
        self._subscribers: dict[Key, set[asyncio.Event]] = {}

    @contextmanager
    def subscribe(self, tenant: str, session_id: str) -> Iterator[asyncio.Event]:
        """Yield an event set by every later `notify` of (tenant, session_id)."""
        key = (tenant, session_id)
        event = asyncio.Event()
        self._subscribers.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            events = self._subscribers.get(key)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._subscribers[key]

    def notify(self, tenant: str, session_id: str) -> None:
        """Wake every watcher of (tenant, session_id); call after the write committed."""
        for event in self._subscribers.get((tenant, session_id), ()):
            event.set()

    def watchers(self, tenant: str, session_id: str) -> int:
        """Return how many watchers (tenant, session_id) has (for tests and metrics)."""
        return len(self._subscribers.get((tenant, session_id), ()))
