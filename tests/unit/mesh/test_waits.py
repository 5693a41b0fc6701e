"""mesh.waits.wait_event never loses a cancellation (python gh-86296 under asyncio.wait_for on 3.11).

A waiter is cancelled in the same instant its event is set (what a background loop sees when
a change and a stop arrive together): a waiter whose cancel() was accepted (it had not
finished yet) must end cancelled, never as a normal return that lets a loop go round again.
With asyncio.wait_for in place of wait_event the cancellation is lost
(`test_wait_for_loses_it`, the reason this module exists).
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agentrt.mesh.waits import to_the_end, wait_event

ROUNDS = 50


async def _wait_for_based(event: asyncio.Event, timeout_s: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        return False
    return True


async def _lost_cancels(wait) -> int:  # type: ignore[no-untyped-def]
    lost = 0
    for _ in range(ROUNDS):
        event = asyncio.Event()
        task = asyncio.ensure_future(wait(event, 30.0))
        await asyncio.sleep(0)  # the waiter waits
        await asyncio.sleep(0)
        event.set()  # a change ...
        accepted = task.cancel()  # ... and a stop, together
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if accepted and not task.cancelled():
            lost += 1
    return lost


async def test_a_cancel_with_the_event_is_never_lost():
    assert await _lost_cancels(wait_event) == 0


async def test_wait_for_loses_it():
    # The bug this module works around; if a Python fixes it, this says so (then drop the module).
    assert await _lost_cancels(_wait_for_based) > 0


async def test_an_event_set_or_a_bound_reached_says_which():
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True
    later = asyncio.Event()
    asyncio.get_running_loop().call_soon(later.set)
    assert await wait_event(later, None) is True


async def test_to_the_end_lets_the_work_finish_before_the_cancel_propagates():
    gate, done = asyncio.Event(), []

    async def work() -> str:
        await gate.wait()
        done.append(True)
        return "written"

    waiter = asyncio.create_task(to_the_end(work()))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    assert not waiter.done()  # still waiting for the work, not cut
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert done == [True]


async def test_to_the_end_returns_the_result_when_not_cancelled():
    async def work() -> int:
        await asyncio.sleep(0)
        return 7

    assert await to_the_end(work()) == 7
