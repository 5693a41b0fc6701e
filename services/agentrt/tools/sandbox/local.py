"""The local sandbox: runs `bash -c CMD` under bubblewrap, bounded in time, output and resources.

Isolation (mode "bwrap"): `launch.confined` builds the command line. The service never
runs a command as root (it drops to an unprivileged uid before bwrap), every namespace is
unshared (no network), only the workspace is writable, rlimits bound CPU, memory, file
size, open files and processes (RLIMIT_NPROC, set inside the sandbox's user namespace).
`probe()` checks all of it at startup from inside and outside.

Ending (004 §2.7m): the sandbox's own timer releases the command's guard (`guard.py`): its
pid 1 exits and the kernel kills every process of its pid namespace (bwrap's nested one and
setsid'd grandchildren included) before the launcher the service waits for can exit, so
when `run` returns nothing it started is left. The same guard kills everything when the
service dies, however it dies. A caller's deadline that arrives first, or its
cancellation, kills the same way but is reported as `CallerDeadline` / CancelledError,
never as a timeout.

Mode "unconfined" (explicit opt-in) runs bash directly in its own process group with the
same environment and rlimits; a process that leaves the group survives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrt.core.errors import Reason, precondition
from agentrt.tools.calls.output import CappedOutput, ProgressBudget
from agentrt.tools.config import SANDBOX_UNCONFINED, CommandLimits
from agentrt.tools.files.paths import Workspace
from agentrt.tools.sandbox import launch as launcher
from agentrt.tools.sandbox.guard import SandboxGuard, SandboxOwner
from agentrt.tools.sandbox.spec import CallerDeadline, CommandRequest, CommandResult

log = logging.getLogger("agentrt.tools")

_KILL_WAIT_SECONDS = 5.0
_DRAIN_SECONDS = 2.0


@dataclass(eq=False)
class _Running:
    proc: asyncio.subprocess.Process
    group: str
    guard: SandboxGuard | None = field(default=None, repr=False)
    stopped: bool = False

    def kill(self) -> None:
        """Release the guard (bwrap), or SIGKILL the process group (unconfined). Idempotent."""
        if self.guard is not None:
            self.guard.release()
        elif self.proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class LocalSandbox:
    """Runs commands under bubblewrap, or unconfined when opted into (see the module docstring)."""

    def __init__(
        self, mode: str, max_progress_bytes: int, bwrap: str = "bwrap", owner: SandboxOwner | None = None
    ) -> None:
        """Create the runner; `probe()` decides whether it may run anything.

        Args:
            mode: "bwrap" or "unconfined".
            max_progress_bytes: progress streamed per command, bytes.
            bwrap: the bubblewrap executable, a name on PATH or a path.
            owner: the marks on every guard (state dir, this process) for the start-up
                reaper; None: this process, no state dir.
        """
        self.mode = mode
        self.owner = owner if owner is not None else SandboxOwner()
        self.max_progress_bytes = max_progress_bytes
        self.available = False
        self.problem = "the sandbox has not been probed yet"
        self._bins = launcher.Binaries(
            bwrap=shutil.which(bwrap) or "",
            prlimit=shutil.which("prlimit") or "",
            unshare=shutil.which("unshare") or "",
            setpriv=shutil.which("setpriv") or "",
            bash=shutil.which("bash") or "/bin/bash",
        )
        self._running: set[_Running] = set()

    # -- availability -------------------------------------------------------------------

    async def probe(self, scratch: Workspace) -> None:
        """Check that isolation holds by running a command that looks for every way out.

        Sets `available` and, when not, `problem` (a sentence). Never raises.
        """
        bins = self._bins
        needed = {"prlimit": bins.prlimit}
        if os.geteuid() == 0:
            needed["setpriv"] = bins.setpriv
        if self.mode != SANDBOX_UNCONFINED:
            needed["bwrap"] = bins.bwrap
            needed["unshare"] = bins.unshare  # the guard's pid namespace
        missing = [name for name, path in needed.items() if not path]
        if missing:
            self.available = False
            self.problem = f"{', '.join(missing)} not installed (apt-get install bubblewrap util-linux)"
            return
        if self.mode == SANDBOX_UNCONFINED:
            self.available, self.problem = True, ""
            return
        self.available = True  # let run() through once; reset below on failure
        script = (
            'r=""; [ "$(id -u)" != 0 ] || r="$r uid0"; '
            '! cat /etc/shadow >/dev/null 2>&1 || r="$r shadow"; '
            '! touch /usr/.agentrt-probe 2>/dev/null || r="$r usr-writable"; '
            '[ "$(grep -c : /proc/net/dev)" = 1 ] || r="$r network"; '
            'echo isolated > probe.txt || r="$r workspace"; echo "result:$r"'
        )
        req = CommandRequest(script, scratch, scratch.path, {}, 20.0, CommandLimits(), 4096)
        try:
            result = await self.run(req, emit=None, deadline=None)
            written = ""
            with contextlib.suppress(OSError), open(os.path.join(scratch.path, "probe.txt")) as f:
                written = f.read().strip()
            verdict = result.output.strip().rsplit("result:", 1)
            if result.exit_code != 0 or len(verdict) != 2 or verdict[1].strip() or written != "isolated":
                self.available = False
                self.problem = f"the isolation probe failed: {result.output.strip()[-500:]!r}"
            else:
                self.problem = ""
        except Exception as exc:  # noqa: BLE001 - a failed probe is a state, not a crash
            self.available = False
            self.problem = f"the isolation probe could not run: {exc}"

    def require(self) -> None:
        """Raise unless commands may run.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE with the probe's finding.
        """
        if not self.available:
            raise precondition(
                Reason.SANDBOX_UNAVAILABLE, f"the local sandbox is unavailable: {self.problem}"
            )

    # -- running ------------------------------------------------------------------------

    async def run(
        self, req: CommandRequest, *, emit: Callable[[str, str], None] | None, deadline: float | None
    ) -> CommandResult:
        """Run one command to its end, its timeout, or the caller's ending.

        Args:
            req: the command.
            emit: receives ("stdout"|"stderr", text) chunks as they arrive (004 §2.7g); None for none.
            deadline: the caller's deadline on the event loop's clock, or None.

        Returns:
            The result; `timed_out` only when the sandbox's own timer killed it.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE when commands may not run.
            CallerDeadline: the caller's deadline came first (the command was killed).
            asyncio.CancelledError: the caller went away (the command was killed).
        """
        self.require()
        loop = asyncio.get_running_loop()
        capture = CappedOutput(req.max_output_bytes)
        progress = ProgressBudget(emit, self.max_progress_bytes)
        started = time.monotonic()
        run = await self._spawn(req)
        self._running.add(run)
        assert run.proc.stdout is not None and run.proc.stderr is not None
        pumps = [
            asyncio.create_task(_pump(run.proc.stdout, "stdout", capture, progress)),
            asyncio.create_task(_pump(run.proc.stderr, "stderr", capture, progress)),
        ]
        waiter = asyncio.create_task(run.proc.wait())
        timed_out = False
        try:
            caller_left = None if deadline is None else deadline - loop.time()
            limit = req.timeout_seconds if caller_left is None else min(req.timeout_seconds, caller_left)
            await asyncio.wait({waiter}, timeout=max(0.0, limit))
            ended_early = not waiter.done()
            # The caller's ending is checked first (§2.7m): a tie is the caller's.
            caller_first = ended_early and caller_left is not None and caller_left <= req.timeout_seconds
            # Always: whatever the command left behind (a background job) dies with it.
            await self._terminate(run, waiter)
            await _drain(pumps)
            if caller_first:
                raise CallerDeadline(capture.text())
            timed_out = ended_early
        except asyncio.CancelledError:
            run.kill()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._terminate(run, waiter)), _KILL_WAIT_SECONDS)
            for task in pumps:
                task.cancel()
            raise
        finally:
            self._running.discard(run)
            run.kill()  # idempotent; the guard's pipe never outlives the command
        code = run.proc.returncode if run.proc.returncode is not None else -9
        return CommandResult(
            exit_code=128 - code if code < 0 else code,
            timed_out=timed_out,
            stopped=run.stopped and not timed_out,
            output=capture.text(),
            truncated=capture.truncated,
            total_bytes=capture.total_bytes,
            duration_seconds=time.monotonic() - started,
        )

    async def _terminate(self, run: _Running, waiter: asyncio.Task[int]) -> None:
        """Kill everything the command started and return once it is gone.

        bwrap: release the guard; the launcher (unshare) exits only after the guard, pid 1
        of the namespace, has exited, which the kernel lets happen only once every process
        of the namespace is killed and reaped. Unconfined: SIGKILL to the process group.
        """
        run.kill()
        done, _ = await asyncio.wait({waiter}, timeout=_KILL_WAIT_SECONDS)
        if not done:
            # A guard that did not answer: SIGKILL the launcher and the guard (its group).
            log.warning("a sandbox's guard did not end within %.0f s; killing it", _KILL_WAIT_SECONDS)
            with contextlib.suppress(OSError):
                os.killpg(run.proc.pid, signal.SIGKILL)
            await waiter

    def kill_group(self, group: str) -> int:
        """Kill every running command of a sandbox (StopSandbox/DestroySandbox); return how many."""
        victims = [r for r in self._running if group and r.group == group]
        for run in victims:
            run.stopped = True
            run.kill()
        return len(victims)

    async def close(self) -> None:
        """Kill every running command (service shutdown)."""
        for run in list(self._running):
            run.kill()

    async def _spawn(self, req: CommandRequest) -> _Running:
        ws = req.workspace
        if self.mode == SANDBOX_UNCONFINED:
            launch = launcher.unconfined(self._bins, req.command, ws, req.workdir, req.env, req.limits)
        else:
            launch = launcher.confined(
                self._bins, req.command, ws, req.workdir, req.env, req.limits, self.owner
            )
        pipe = asyncio.subprocess.PIPE
        proc = await launcher.spawn(launch, asyncio.subprocess.DEVNULL, pipe, pipe)
        return _Running(proc, req.group, launch.guard)


async def _pump(
    stream: asyncio.StreamReader, name: str, capture: CappedOutput, progress: ProgressBudget
) -> None:
    while chunk := await stream.read(65536):
        capture.feed(chunk)
        progress.feed(name, chunk)


async def _drain(pumps: list[asyncio.Task[None]]) -> None:
    """Wait for the output pipes to close.

    A descendant that kept one open (unconfined mode only) costs at most _DRAIN_SECONDS and
    the rest of its output.
    """
    _, pending = await asyncio.wait(pumps, timeout=_DRAIN_SECONDS)
    for task in pending:
        task.cancel()
