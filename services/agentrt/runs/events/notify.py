"""Events across runs replicas: a PostgreSQL LISTEN that wakes this process's subscribers.

What it owns: one dedicated asyncpg connection per runs process, LISTENing on
`store.EVENTS_CHANNEL`. Every transaction that writes run events sends one notification at
commit (store._notify); the callback here pokes the subscribers of that run's and that
session's topics (`EventHub.wake`), whose streams then re-read storage. So a subscriber on
replica B sees the events of a run executing on replica A as soon as A's save point
commits, with no polling interval in the path (decision 0011).

Invariants:
- the LISTEN is in place before the service reports SERVING (`start()` returns after it),
  so a stream that subscribes afterwards misses no notification sent after its replay read;
- this replica's own notifications are ignored (its hub delivered those events already);
- when the connection is lost, it is re-opened with capped backoff and, once LISTENing
  again, EVERY subscriber is poked: whatever was notified meanwhile is re-read from storage,
  so a lost connection delays events but never loses them;
- SQLite has no listener: there, the in-process hub (and the stream's poll, for a second
  process on the same file) is the path.

The same connection LISTENs on `store.INPUT_CHANNEL`, where every push of injected input
notifies its run id at its commit, and tells the process's `InputWatch`
(runs/storage/input_watch.py, decision 0060): a push it hears of makes the run's executor
read its queue again; while the connection is down, every executor reads its queue each turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from sqlalchemy.engine import make_url

from agentrt.runs.events.hub import EventHub
from agentrt.runs.storage.input_watch import InputWatch
from agentrt.runs.storage.store import EVENTS_CHANNEL, INPUT_CHANNEL

log = logging.getLogger("agentrt.runs")

#: Reconnect backoff of the LISTEN connection: first and longest wait, in seconds.
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 5.0


def libpq_dsn(url: str) -> str:
    """Return the asyncpg DSN of a `postgresql+asyncpg://` SQLAlchemy URL (password kept)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class EventListener:
    """The LISTEN connection of one runs process (see the module docstring)."""

    def __init__(self, url: str, hub: EventHub, replica: str, watch: InputWatch | None = None) -> None:
        """Listen on the database of `url` (postgresql+asyncpg) for `hub`; skip `replica`'s own.

        With `watch`, also hear of pushed input for it (see the module docstring).
        """
        self._dsn = libpq_dsn(url)
        self._hub = hub
        self._replica = replica
        self._watch = watch
        self._conn: Any = None
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Notifications that woke subscribers here (tests and metrics read it).
        self.received = 0

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is open."""
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        """Open the connection and LISTEN; then keep it open in the background.

        Raises:
            OSError, asyncpg.PostgresError: the database did not answer (the service does not
                become SERVING without its listener).
        """
        await self._connect()
        self._task = asyncio.create_task(self._keep(), name="agentrt-runs-listen")

    async def close(self) -> None:
        """Stop listening and close the connection."""
        if self._watch is not None:
            self._watch.lost()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)

    async def _connect(self) -> None:
        import asyncpg

        conn = await asyncio.wait_for(asyncpg.connect(self._dsn), 10)
        self._lost.clear()
        conn.add_termination_listener(self._on_lost)
        try:
            await conn.add_listener(EVENTS_CHANNEL, self._on_notify)
            if self._watch is not None:
                await conn.add_listener(INPUT_CHANNEL, self._on_input)
        except BaseException:
            conn.remove_termination_listener(self._on_lost)
            conn.terminate()
            raise
        if self._watch is not None:
            self._watch.heard_again()
        self._conn = conn

    def _on_lost(self, _conn: Any) -> None:
        if self._watch is not None:
            self._watch.lost()
        self._lost.set()

    def _on_input(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if self._watch is not None:
            self._watch.pushed(payload)

    async def _keep(self) -> None:
        while True:
            await self._lost.wait()
            self._conn = None
            delay = RECONNECT_FIRST_S
            while True:
                try:
                    await self._connect()
                    break
                except Exception:  # noqa: BLE001 - retried; streams keep what they have
                    log.warning("runs: event LISTEN connection lost; retrying in %.1fs", delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RECONNECT_MAX_S)
            log.info("runs: event LISTEN connection re-opened; every stream re-reads storage")
            self._hub.wake_all()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            note = json.loads(payload)
            replica, run_id = note["replica"], note["run_id"]
            tenant, session_id = note["tenant"], note["session_id"]
        except (ValueError, KeyError, TypeError):
            log.warning("runs: ignoring a malformed event notification %r", payload[:200])
            return
        if replica and replica == self._replica:
            return
        self.received += 1
        self._hub.wake(run_id, tenant, session_id)
