"""The task service's background passes (delivery, wake, parent checks): one loop shape.

A pass that fails is logged and the loop goes on (it outlives a database hiccup); stopping
cancels it, and what a pass had claimed expires for another replica or a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


def run_passes(
    name: str, what: str, pass_once: Callable[[], Awaitable[object]], wait: Callable[[], Awaitable[object]]
) -> asyncio.Task[None]:
    """Start `pass_once` in the background, then `wait` between passes; return the task.

    Args:
        name: the asyncio task's name, e.g. "agentrt-tasks-delivery".
        what: the pass in a log line, e.g. "delivery pass".
        pass_once: one pass (its result is ignored).
        wait: what comes between passes (a sleep, or the hub's wake-up with a bound).
    """

    async def loop() -> None:
        while True:
            try:
                await pass_once()
            except Exception:  # noqa: BLE001 - the loop outlives a database hiccup
                log.exception("%s failed", what)
            await wait()
            await asyncio.sleep(0)

    return asyncio.create_task(loop(), name=name)


async def stop_passes(task: asyncio.Task[None] | None) -> None:
    """Cancel a loop run_passes started (None: nothing to stop) and wait for it to end.

    The cancel is repeated each second until the loop has ended: a cancellation that some
    awaited library swallowed (mesh/waits.py says how) must not keep a stop waiting forever.
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()
