"""A journaled call outliving its caller, and whose process a journal record names.

A `Flight` is one journaled call running in this process: its task belongs to the
executor, not to a request, so a request that goes away (its caller died, its connection
dropped, it cancelled the RPC) only stops listening and the call runs on to its end; a
repeat of the same key listens to the same flight (its output chunks too). Only a cancel
on purpose (CancelExecution, a shutdown) cancels the task, and says why in `cancel_reason`.

An owner (`process_identity`) names one process instance: host, pid, the process's start
time and a random part, so a record's owner can be told dead (`owner_dead`) on this host
even after its pid is reused.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket

from agentrt.tools.calls.results import Outcome
from agentrt.tools.execution.request import Emit


class NotRun(Exception):
    """The attempt a request joined never ran (refused, or lost the race to another process)."""


def process_identity() -> str:
    """This process's owner string: "<host[:24]>:<pid>:<start time>:<8 hex>"."""
    try:
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "0"
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{start}:{secrets.token_hex(4)}"


def owner_dead(owner: str) -> bool:
    """True when owner names a process on this host that no longer exists."""
    try:
        host, pid, start, _ = owner.rsplit(":", 3)
    except ValueError:
        return False
    if host != socket.gethostname()[:24]:
        return False
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19] != start
    except (OSError, ValueError, IndexError):
        return True


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

    def not_run(self) -> None:
        """End the flight as never run: its listeners look the record up again."""
        self.done.set_exception(NotRun())
