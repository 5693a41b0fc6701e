"""Waiting for an event with a bound, without ever losing a cancellation.

`asyncio.wait_for` on Python 3.11 can turn a cancellation of the waiting task that arrives as
its timeout fires into a TimeoutError (python/cpython gh-86296, fixed in 3.12, whose
`wait_for` is built on `asyncio.timeout`). A loop that treats TimeoutError as "no event,
go round again" then never sees the cancel: a background pass or a stream handler that a
server's stop cancelled runs on, and the stop waits for it forever (seen: the task service's
delivery loop at a test's teardown). `asyncio.timeout` tells its own expiry from an outside
cancel (it counts cancellation requests), so a cancel always propagates.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` seconds passed (None: no bound).

    Returns:
        True when the event was set, False when the time ran out.

    Raises:
        asyncio.CancelledError: the waiting task was cancelled (never turned into a timeout).
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(None if timeout_s is None else max(timeout_s, 0.0)):
            await event.wait()
    except TimeoutError:
        return False
    return True
