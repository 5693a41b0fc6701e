"""Persistent named shells for exec_command (004 §2.7k): the pool and its executor-facing side.

A call with `session_id` runs in a long-lived bash (`shell.session.Shell` over a
`terminal.Terminal`), so cd, exported variables and an activated environment survive
between calls. Decisions (docs/services/tools.md "Persistent shells"):
- A shell is keyed by (tenant, sandbox or workspace, session_id): it belongs to the
  sandbox or workspace, not to the run. Two runs naming the same session in the same
  sandbox share one shell; a run's default workspace is its own, and so are its shells.
- Opening happens outside any pool-wide critical section, so other names never queue
  behind a launch. Two callers racing the same new name both open one; the loser closes
  its own and takes the winner's, so a name maps to exactly one shell.
- Commands on one shell are serialized (the shell's lock). A command that finds its shell
  closed while it waited (a timeout, a Stop) opens a fresh one.
- A shell whose command timed out, failed, or whose caller ended is closed, never reused;
  the next call with its name opens a fresh one.
- The pool is bounded (`max_shells` in all and `max_shells_per_tenant` per tenant, a
  polite is_error refusal when full) and closes shells
  idle longer than `idle_seconds`. StopSandbox/DestroySandbox (and a replacing Create)
  close that sandbox's shells. Closing the pool is final: it closes every terminal first,
  so in-flight commands return an error at once, and any later named command fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.tools.calls.args import ArgError
from agentrt.tools.calls.results import Outcome, ResultStatus, refused
from agentrt.tools.config import ToolsConfig
from agentrt.tools.sandbox.local import LocalSandbox
from agentrt.tools.sandbox.spec import CallerDeadline, ExecContext
from agentrt.tools.shell.session import Shell, ShellCommand, ShellResult
from agentrt.tools.shell.terminal import Opener, local_binaries, open_local

#: (tenant, scope, session_id); scope is "sandbox:<tenant>/<id>" or "workspace:<path>".
ShellKey = tuple[str, str, str]
Emit = Callable[[str, str], None]
_OPEN_SECONDS = 15.0


class PoolFull(Exception):
    """Every shell slot is taken: the service's (per_tenant False) or the tenant's own."""

    def __init__(self, per_tenant: bool = False) -> None:
        super().__init__("the tenant's shells are all in use" if per_tenant else "every shell is in use")
        self.per_tenant = per_tenant


class PoolClosed(Exception):
    """The pool was closed (the service is stopping)."""


class OpenFailed(Exception):
    """A shell could not be started; `str()` says why, with what it printed."""


class ShellPool:
    """Named shells of one service (see the module docstring); transport-agnostic."""

    def __init__(
        self, max_shells: int, idle_seconds: float, max_progress_bytes: int, max_per_tenant: int = 0
    ) -> None:
        """Create an empty pool.

        Args:
            max_shells: the most shells open at once (opening ones included).
            idle_seconds: a shell unused this long is closed, seconds.
            max_progress_bytes: output streamed as progress per command, bytes.
            max_per_tenant: the most shells one tenant (key[0]) holds at once, opening
                ones included; 0 = max_shells.
        """
        self.max_shells = max_shells
        self.max_per_tenant = max_per_tenant or max_shells
        self._launching_by: dict[str, int] = {}
        self.idle_seconds = idle_seconds
        self._max_progress = max_progress_bytes
        self._shells: dict[ShellKey, Shell] = {}
        self._opening: dict[Shell, ShellKey] = {}
        self._launching = 0
        self._epochs: dict[str, int] = {}  # scope -> how many times close_scope ran for it
        self._closed = False
        self._reaper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Shells open now (usable or busy), not counting ones being opened."""
        return sum(1 for s in self._shells.values() if not s.closed)

    async def run(
        self, key: ShellKey, opener: Opener, cmd: ShellCommand, *, emit: Emit | None, deadline: float | None
    ) -> ShellResult:
        """Run cmd in the shell named by key, opening one when there is none.

        Returns:
            The result (`fresh` when a shell was opened for it).

        Raises:
            PoolFull: no shell of that name and no room for one (in the service, or for
                the tenant key[0]).
            PoolClosed: the pool is closed.
            OpenFailed: the shell could not be started.
            CallerDeadline: the caller's deadline passed (the shell was closed).
            asyncio.CancelledError: the caller went away (the shell was closed).
        """
        while True:
            shell, fresh = await self._acquire(key, opener, deadline)
            async with shell.lock:
                if shell.closed:  # closed while we queued behind another command
                    self._forget(key, shell)
                    continue
                try:
                    result = await shell.run(cmd, emit=emit, deadline=deadline)
                finally:
                    if shell.closed:
                        self._forget(key, shell)
            result.fresh = fresh
            return result

    async def _acquire(self, key: ShellKey, opener: Opener, deadline: float | None) -> tuple[Shell, bool]:
        shell = self._shells.get(key)
        if shell is not None and not shell.closed:
            shell.last_used = time.monotonic()
            return shell, False
        if self._closed:
            raise PoolClosed
        if len(self) + self._launching >= self.max_shells:
            raise PoolFull
        tenant = key[0]
        if self._held_by(tenant) >= self.max_per_tenant:
            raise PoolFull(per_tenant=True)
        epoch = self._epochs.get(key[1], 0)
        self._launching += 1
        self._launching_by[tenant] = self._launching_by.get(tenant, 0) + 1
        try:
            shell = await self._open(key, opener, deadline)
        finally:
            self._launching -= 1
            self._launching_by[tenant] -= 1
            if not self._launching_by[tenant]:
                del self._launching_by[tenant]
        if self._closed:
            await shell.close("the shell pool is closed")
            raise PoolClosed
        if self._epochs.get(key[1], 0) != epoch:  # its sandbox was stopped while it opened
            await shell.close("the sandbox was stopped, replaced or destroyed")
            raise OpenFailed("the sandbox was stopped, replaced or destroyed while the shell opened")
        winner = self._shells.get(key)
        if winner is not None and not winner.closed:
            await shell.close("another caller opened this shell first")
            return winner, False
        self._shells[key] = shell
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap())
        return shell, True

    async def _open(self, key: ShellKey, opener: Opener, deadline: float | None) -> Shell:
        loop = asyncio.get_running_loop()
        caller_left = None if deadline is None else deadline - loop.time()
        limit = _OPEN_SECONDS if caller_left is None else min(_OPEN_SECONDS, caller_left)
        try:
            terminal = await opener()
        except OSError as exc:
            raise OpenFailed(f"the shell could not be started: {exc.strerror or exc}") from exc
        shell = Shell(terminal, self._max_progress)
        self._opening[shell] = key
        try:
            problem = await shell.start(limit)
        except BaseException:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(shell.close("the caller went away while it opened"))
            raise
        finally:
            self._opening.pop(shell, None)
        if problem:
            if deadline is not None and caller_left is not None and caller_left <= _OPEN_SECONDS:
                if loop.time() >= deadline - 0.01:  # the caller's deadline ended the wait (§2.7m)
                    raise CallerDeadline("")
            raise OpenFailed(problem)
        return shell

    def _held_by(self, tenant: str) -> int:
        """Shells a tenant has open or is opening."""
        open_now = sum(1 for k, s in self._shells.items() if k[0] == tenant and not s.closed)
        return open_now + self._launching_by.get(tenant, 0)

    def _forget(self, key: ShellKey, shell: Shell) -> None:
        if self._shells.get(key) is shell:
            del self._shells[key]

    async def _reap(self) -> None:
        """Close shells idle longer than idle_seconds (runs until the pool closes)."""
        period = min(30.0, max(0.05, self.idle_seconds / 4))
        while not self._closed:
            await asyncio.sleep(period)
            now = time.monotonic()
            idle = [
                (k, s)
                for k, s in self._shells.items()
                if s.closed or (not s.lock.locked() and now - s.last_used > self.idle_seconds)
            ]
            for key, shell in idle:
                self._forget(key, shell)
            await asyncio.gather(*(s.close("idle for too long") for _, s in idle), return_exceptions=True)

    async def close_scope(self, scope: str, why: str) -> int:
        """Close the shells of one sandbox or workspace, opening ones too; return how many were open."""
        self._epochs[scope] = self._epochs.get(scope, 0) + 1
        doomed = [(k, s) for k, s in self._shells.items() if k[1] == scope]
        for key, shell in doomed:
            self._forget(key, shell)
        opening = [s for s, k in self._opening.items() if k[1] == scope]
        await asyncio.gather(
            *(s.close(why) for s in [*(s for _, s in doomed), *opening]), return_exceptions=True
        )
        return len(doomed)

    async def close(self) -> None:
        """Close every shell, opening ones included, for good (service shutdown)."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        shells = [*self._shells.values(), *self._opening]
        self._shells.clear()
        why = "the tool service is shutting down"
        await asyncio.gather(*(s.close(why) for s in shells), return_exceptions=True)


def scope_of(ctx: ExecContext) -> str:
    """Return the pool scope of a context: its sandbox, else its workspace."""
    return f"sandbox:{ctx.group}" if ctx.group else f"workspace:{ctx.workspace.path}"


class Shells:
    """exec_command's named shells: the pool plus the local transport that opens them."""

    def __init__(self, config: ToolsConfig, runner: LocalSandbox) -> None:
        """Create the pool from the service configuration (nothing is opened yet)."""
        self.enabled = config.shells
        self.pool = ShellPool(
            config.max_shells,
            config.shell_idle_seconds,
            config.max_progress_bytes,
            max_per_tenant=config.max_shells_per_tenant,
        )
        self._runner = runner
        self._bins = local_binaries(config.bwrap_path)

    def opener(self, ctx: ExecContext) -> Opener | None:
        """Return how to open a shell for ctx; None when its backend has no terminal transport."""
        if ctx.runner is not None:
            return None
        runner = self._runner
        return lambda: open_local(self._bins, runner.mode, ctx.workspace, ctx.env, ctx.limits, runner.owner)

    async def exec_command(
        self,
        ctx: ExecContext,
        session: str,
        cmd: str,
        workdir: str,
        timeout: float,
        cap: int,
        *,
        deadline: float | None,
        emit: Emit | None,
    ) -> Outcome:
        """Run exec_command in the shell named session (004 §2.7k).

        Args:
            ctx: where the call runs (tenant, sandbox or workspace, environment, limits).
            session: the shell's name (non-empty).
            cmd: the command text.
            workdir: host directory to cd into first ("" = where the shell is).
            timeout: the shell's own timer, seconds.
            cap: output kept, bytes.
            deadline: the caller's deadline on the event loop's clock, or None.
            emit: progress sink, or None.

        Returns:
            The outcome; is_error for a non-zero status, a timeout (TIMED_OUT), a failed or
            closed shell (partial output, no exit status), a full pool or a backend without shells.

        Raises:
            ArgError: cmd contains NUL.
            MeshError: UNAVAILABLE/SANDBOX_UNAVAILABLE when the pool is closed (shutdown).
            CallerDeadline: the caller's deadline passed (the shell was closed).
            asyncio.CancelledError: the caller went away (the shell was closed).
        """
        if "\x00" in cmd:
            raise ArgError('"cmd" must not contain NUL characters.')
        opener = self.opener(ctx)
        if opener is None:
            return refused(
                "exec_command: this sandbox's backend has no persistent shells; omit session_id.",
                "SESSION_UNSUPPORTED",
            )
        key = (ctx.tenant, scope_of(ctx), session)
        try:
            result = await self.pool.run(
                key, opener, ShellCommand(cmd, workdir, timeout, cap), emit=emit, deadline=deadline
            )
        except PoolFull as exc:
            limit = (
                f"this tenant's {self.pool.max_per_tenant}"
                if exc.per_tenant
                else f"all {self.pool.max_shells}"
            )
            return refused(
                f"exec_command: {limit} persistent shells are in use; run this "
                "command without session_id, or reuse a session_id you already have.",
                "SHELLS_EXHAUSTED",
                limit="tenant" if exc.per_tenant else "service",
            )
        except PoolClosed:
            raise MeshError(
                Status.UNAVAILABLE,
                Reason.SANDBOX_UNAVAILABLE,
                "the tool service is shutting down; its shells are closed",
                retry_after_seconds=1.0,
            ) from None
        except OpenFailed as exc:
            return refused(f"exec_command: {exc}", "SHELL_FAILED", session_id=session)
        return outcome_of(result, session=session, timeout=timeout, sandbox=self._runner.mode)

    async def close_group(self, group: str) -> None:
        """Close the shells of a sandbox (kill group "tenant/sandbox_id"): Stop, Destroy, replace."""
        await self.pool.close_scope(f"sandbox:{group}", "the sandbox was stopped, replaced or destroyed")

    async def close(self) -> None:
        """Close the pool for good (service shutdown)."""
        await self.pool.close()


def outcome_of(result: ShellResult, *, session: str, timeout: float, sandbox: str) -> Outcome:
    """Map a shell result to the tool's outcome, as the one-shot path does (markers included)."""
    content = result.output
    sep = "\n" if content and not content.endswith("\n") else ""
    details = {
        "session_id": session,
        "shell": "new" if result.fresh else "reused",
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "output_bytes": result.total_bytes,
        "sandbox": sandbox,
        "timeout_seconds": timeout,
    }
    outcome = Outcome(
        content=content,
        summary=f"exit 0 in {result.duration_seconds:.2f} s",
        details=details,
        exit_code=result.exit_code or 0,
        output_truncated=result.truncated,
    )
    fresh_next = f"the next call with session_id {session!r} starts a new shell"
    if result.timed_out:
        note, outcome.status = f"timed out after {timeout:g} s", ResultStatus.TIMED_OUT
        outcome.content += f"{sep}[{note}; the shell and everything it started were killed; {fresh_next}]"
    elif result.error:
        note, outcome.status = result.error, ResultStatus.ERROR
        details["reason"], details["error"] = "SHELL_FAILED", result.error
        outcome.content += f"{sep}[{result.error}; no exit status; the session's state is gone; {fresh_next}]"
    elif result.exit_code:
        note, outcome.status = f"exit {result.exit_code}", ResultStatus.ERROR
        outcome.content += f"{sep}[exit status {result.exit_code}]"
    else:
        return outcome
    outcome.is_error, outcome.summary = True, note
    return outcome
