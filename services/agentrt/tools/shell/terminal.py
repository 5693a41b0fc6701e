"""The transport of a persistent shell: an isolated bash on a PTY (004 §2.7k), local backend.

`open_local` launches an interactive bash under exactly the isolation of a one-shot
command: the same `launch.confined` argv (unprivileged uid dropped before bwrap, every
namespace unshared, no network, the workspace the only writable place, rlimits, cleared
environment plus the sandbox's own), or `launch.unconfined` in the opted-in unconfined
mode. Only stdin/stdout/stderr differ: they are the slave side of a new PTY whose master
the service keeps.

Invariants:
- The PTY is private to the shell: the service closes its copy of the slave right after
  the spawn and writes only the lines `session.py` builds. bwrap's --new-session leaves the
  shell without a controlling terminal, so TIOCSTI can at most push bytes into this same
  private PTY, never into a terminal of the service.
- The line discipline is raw with no echo (set before the shell starts and again before
  every command, `prepare`): input is never transformed or limited to a line length, and
  no echo comes back (session.py still strips one as an exact prefix if it appears).
- Reading happens in the event loop's reader callback, never as a blocking read on the
  caller's task, so a timer can always end a wait.
- `close()` releases the shell's guard (`sandbox/guard.py`): pid 1 of its pid namespace
  exits, so the kernel kills every process the shell started (setsid'd ones included)
  before it returns; idempotent, and concurrent callers all wait for the same kill. The
  same guard kills the shell when the service dies.

A docker transport would implement `Terminal` over an exec'd TTY; the pool does not care.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import signal
import struct
import termios
import tty
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from agentrt.tools.config import SANDBOX_UNCONFINED, CommandLimits
from agentrt.tools.files.paths import Workspace
from agentrt.tools.sandbox import launch as launcher
from agentrt.tools.sandbox.guard import SandboxGuard, SandboxOwner

log = logging.getLogger("agentrt.tools")

#: What the launcher's `bash -c` runs: an interactive bash without profile, rc or readline
#: (readline would echo input itself, whatever the line discipline says).
SHELL_COMMAND = "exec bash --noprofile --norc --noediting -i"
_ROWS, _COLUMNS = 50, 200
_KILL_WAIT_SECONDS = 5.0
_READ_BYTES = 65536


class Terminal(Protocol):
    """A byte stream to a shell on a PTY, and the means to end it."""

    def start(self, on_data: Callable[[bytes], None], on_end: Callable[[str], None]) -> None:
        """Begin delivering output to on_data; on_end(why) is called once when the shell is gone."""

    def prepare(self) -> None:
        """Put the line discipline back to raw with no echo (best effort)."""

    async def write(self, data: bytes) -> None:
        """Write all of data to the shell's input.

        Raises:
            OSError: the terminal is closed or the write failed.
        """

    async def close(self) -> None:
        """Kill the shell and everything it started; return once they are gone."""

    @property
    def exit_status(self) -> int | None:
        """The shell's exit status once it has ended by itself, else None."""


Opener = Callable[[], Awaitable[Terminal]]


def local_binaries(bwrap: str) -> launcher.Binaries:
    """Return the helper executables, looked up the way `LocalSandbox` looks them up."""
    return launcher.Binaries(
        bwrap=shutil.which(bwrap) or "",
        prlimit=shutil.which("prlimit") or "",
        unshare=shutil.which("unshare") or "",
        setpriv=shutil.which("setpriv") or "",
        bash=shutil.which("bash") or "/bin/bash",
    )


async def open_local(
    bins: launcher.Binaries,
    mode: str,
    ws: Workspace,
    env: Mapping[str, str],
    limits: CommandLimits,
    owner: SandboxOwner | None = None,
) -> PtyTerminal:
    """Launch an interactive bash on a new PTY under the one-shot isolation, in the workspace root.

    Args:
        bins: the helper executables.
        mode: "bwrap" or "unconfined" (the runner's mode; the caller checked it may run).
        ws: the workspace.
        env: the sandbox's variables on top of the base environment.
        limits: rlimits of the shell and everything it starts.
        owner: the marks on the guard for the start-up reaper (the runner's); None: this
            process, no state dir.

    Returns:
        The terminal, not yet reading (see `PtyTerminal.start`).

    Raises:
        OSError: no PTY, or the launcher could not be executed.
        MeshError: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE when no staging directory exists.
    """
    master, slave = os.openpty()
    try:
        tty.setraw(slave, termios.TCSANOW)
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", _ROWS, _COLUMNS, 0, 0))
        if mode == SANDBOX_UNCONFINED:
            launch = launcher.unconfined(bins, SHELL_COMMAND, ws, ws.path, env, limits)
        else:
            launch = launcher.confined(bins, SHELL_COMMAND, ws, ws.path, env, limits, owner)
        proc = await launcher.spawn(launch, slave, slave, slave)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return PtyTerminal(master, proc, launch.guard)


class PtyTerminal:
    """The local `Terminal`: the PTY master plus the launcher process (see the module docstring)."""

    def __init__(self, master: int, proc: asyncio.subprocess.Process, guard: SandboxGuard | None) -> None:
        """Take ownership of the PTY master, the launcher process and its guard (None: unconfined)."""
        self._loop = asyncio.get_running_loop()
        self._master = master
        os.set_blocking(master, False)
        self._proc = proc
        self._guard = guard
        self._waiter = asyncio.create_task(proc.wait())
        self._on_data: Callable[[bytes], None] | None = None
        self._on_end: Callable[[str], None] | None = None
        self._reading = False
        self._ended = False
        self._closing: asyncio.Task[None] | None = None

    @property
    def exit_status(self) -> int | None:
        """The launcher's exit status (bwrap passes the shell's own) once it has exited."""
        return self._proc.returncode

    def start(self, on_data: Callable[[bytes], None], on_end: Callable[[str], None]) -> None:
        """Deliver output chunks to on_data from the event loop; on_end(why) once at the end."""
        self._on_data, self._on_end = on_data, on_end
        self._loop.add_reader(self._master, self._readable)
        self._reading = True
        # Unconfined, a background job may hold the PTY open after bash exits: the exit
        # itself ends the terminal too, once what is already buffered has been read.
        self._waiter.add_done_callback(lambda _: self._drain())

    def prepare(self) -> None:
        """Reset the shared termios to raw, no echo (a command may have run `stty sane`)."""
        if self._closing is None:
            with contextlib.suppress(OSError, termios.error):
                tty.setraw(self._master, termios.TCSANOW)

    async def write(self, data: bytes) -> None:
        """Write data to the master, waiting for room when the shell reads slower.

        Raises:
            OSError: EIO when the terminal is closed.
        """
        view = memoryview(data)
        while view:
            if self._closing is not None or self._ended:
                raise OSError(errno.EIO, "the terminal is closed")
            try:
                view = view[os.write(self._master, view) :]
            except BlockingIOError:
                room: asyncio.Future[None] = self._loop.create_future()
                self._loop.add_writer(self._master, _wake, room)
                try:
                    await room
                finally:
                    self._loop.remove_writer(self._master)

    def _readable(self) -> None:
        try:
            data = os.read(self._master, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            # EIO: every descriptor of the slave is closed, so the shell and all it started are gone.
            self._end("the shell exited" if exc.errno == errno.EIO else f"reading the shell failed: {exc}")
            return
        if not data:
            self._end("the shell exited")
        elif self._on_data is not None:
            self._on_data(data)

    def _drain(self) -> None:
        while self._reading:
            self._readable()
            if self._reading and not _pending(self._master):
                break
        self._end("the shell exited")

    def _end(self, why: str) -> None:
        if self._reading:
            self._loop.remove_reader(self._master)
            self._reading = False
        if not self._ended:
            self._ended = True
            if self._on_end is not None:
                self._on_end(why)

    async def close(self) -> None:
        """Kill the shell's pid namespace (or process group when unconfined) and free the PTY."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._kill())
        await asyncio.shield(self._closing)

    async def _kill(self) -> None:
        try:
            if self._guard is not None:
                # The launcher exits only once the guard, and so the whole namespace, is gone.
                self._guard.release()
            elif self._proc.returncode is None:
                with contextlib.suppress(OSError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
            done, _ = await asyncio.wait({self._waiter}, timeout=_KILL_WAIT_SECONDS)
            if not done:
                log.warning("a shell's guard did not end within %.0f s; killing it", _KILL_WAIT_SECONDS)
                with contextlib.suppress(OSError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                await self._waiter
        finally:
            self._end("the shell was closed")
            if self._guard is not None:
                self._guard.release()
            os.close(self._master)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _pending(fd: int) -> bool:
    """True when fd has bytes to read right now."""
    try:
        return bool(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return False
