"""Waiting for an event with a bound, without ever losing a cancellation.

`asyncio.wait_for` on Python 3.11 can turn a cancellation of the waiting task that arrives as
its timeout fires into a TimeoutError (python/cpython gh-86296, fixed in 3.12, whose
`wait_for` is built on `asyncio.timeout`). A loop that treats TimeoutError as "no event,
go round again" then never sees the cancel: a background pass or a stream handler that a
server's stop cancelled runs on, and the stop waits for it forever (seen: the task service's
delivery loop at a test's teardown). `asyncio.timeout` tells its own expiry from an outside
cancel (it counts cancellation requests), so a cancel always propagates.

`to_the_end` is the other way round: work a cancel must not interrupt, whose cancel is
raised once the work ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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


async def to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """Await work, which runs to its end even when the awaiting task is cancelled meanwhile.

    For short writes that must not be cut in half by a cancel (a run's hand-over at a drain's
    deadline). Cancelled, this waits for work to end, then raises the CancelledError (a second
    cancel ends the wait at once; work still runs to its end, its outcome dropped).

    Returns:
        work's result.

    Raises:
        asyncio.CancelledError: the awaiting task was cancelled (after work ended).
        Exception: what work raised, when not cancelled.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: the cancel is what the caller gets
        raise
