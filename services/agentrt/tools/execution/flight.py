"""A journaled call outliving its caller, and whose process a journal record names.

A `Flight` is one journaled call running in this process: its task belongs to the
executor, not to a request, so a request that goes away (its caller died, its connection
dropped, it cancelled the RPC) only stops listening and the call runs on to its end; a
repeat of the same key listens to the same flight (its output chunks too). Only a cancel
on purpose (CancelExecution, a shutdown) cancels the task, once, and says why in `cancel_reason`.

The task publishes itself (`task` is set by the task's own first statement, never by the
code creating it), so `task` names a task whose body runs. A task cancelled before its first
step never runs its body at all: its try/finally never starts, so nothing would end the
flight. A cancel that comes before that step (while the STARTED record is written, or in the
turn between the task's creation and its first step) therefore only records its reason, and
the body, on its first step, ends the call unrun (decision 0053).

Who owns a record (`process_identity`, `owner_dead`) lives in `tools.identity`.
"""

from __future__ import annotations

import asyncio

from agentrt.tools.calls.results import Outcome
from agentrt.tools.execution.request import Emit


class NotRun(Exception):
    """The attempt a request joined never ran (refused, or lost the race to another process)."""


class Flight:
    """One journaled call running in this process: its task, its result, who listens.

    The task belongs to the executor, not to a request: a request that goes away (its
    caller died, its connection dropped) stops listening and the call runs on to its end.
    """

    def __init__(self, fp: str) -> None:
        """A flight of the call with fingerprint fp; its task is set once the STARTED record is won."""
        self.fingerprint = fp
        self.done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        # A failure nobody awaits any more is not news: mark it retrieved.
        self.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        #: The task running the call's body, set by its first statement (module docstring).
        self.task: asyncio.Task[None] | None = None
        self.emitters: list[Emit] = []
        #: Why the call was cancelled on purpose ("" = it was not).
        self.cancel_reason = ""

    def emit(self, stream: str, text: str) -> None:
        """Pass one output chunk to every request listening now."""
        for sink in list(self.emitters):
            sink(stream, text)

    async def result(self, emit: Emit | None) -> Outcome:
        """Wait for the call's outcome, passing its output chunks to emit meanwhile.

        Raises:
            NotRun: the attempt never ran; MeshError or another exception: what ended it.
        """
        if emit is not None:
            self.emitters.append(emit)
        try:
            return await asyncio.shield(self.done)
        finally:
            if emit is not None and emit in self.emitters:
                self.emitters.remove(emit)

    def cancel(self, why: str) -> None:
        """Cancel the call on purpose: kill it when its body runs, else make it end unrun.

        The first reason given is kept, and only the first cancel cancels the task: a later
        one (a second CancelExecution, a shutdown during a cancel) would cut short the task's
        own ending (the kill, the journal write of INTERRUPTED or NOT_EXECUTED), so the flight
        would end before its record is FINISHED and a canceller would read it STARTED. The
        caller waits for the ending through `result`.
        """
        if self.cancel_reason:
            return  # already cancelled: the task ends on its own (the first cancel's path)
        self.cancel_reason = why or "it was cancelled"
        if self.task is not None:
            self.task.cancel()

    def not_run(self) -> None:
        """End the flight as never run: its listeners look the record up again."""
        self.done.set_exception(NotRun())
