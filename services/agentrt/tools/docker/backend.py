"""The docker sandbox backend: commands run by `docker exec` in the sandbox's own container.

A docker sandbox is one persistent container (docker/engine.py: created, adopted by
fingerprint or replaced; the workspace bind-mounted at /workspace). `ContainerRunner.run`
has `LocalSandbox.run`'s contract:

- Each command is `docker exec` of the keeper `agentrt-exec --run MARK bash -c CMD`
  (scripts/agentrt-exec.c). The keeper is a child subreaper, so everything the command
  starts (setsid'd, double-forked) stays below it; when bash exits the keeper SIGKILLs and
  reaps that whole tree before the exec ends. Killing a command is a second exec,
  `agentrt-exec --kill MARK` (as root), which makes the keeper do the same at once.
- Output is read on a dedicated thread per command (never the event loop; never the
  engine pool, which a long command would starve) and fed to the same head+tail capture
  and progress budget as the local backend.
- Endings (004 §2.7m): the sandbox's own timer → kill, `timed_out`; the caller's deadline
  → kill, `CallerDeadline` (checked first: a tie is the caller's); cancellation → kill,
  CancelledError. The kill is awaited (bounded) before answering. A broken output stream
  after the kill costs output, never the verdict.
- StopSandbox/DestroySandbox mark the sandbox's running commands `stopped`; stopping or
  removing the container is what kills them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors

from agentrt.core.errors import Reason, precondition
from agentrt.tools.calls.output import CappedOutput, ProgressBudget
from agentrt.tools.config import DockerSettings
from agentrt.tools.docker.engine import HELPER, WORKSPACE, ContainerSpec, Engine
from agentrt.tools.sandbox.spec import CallerDeadline, CommandRequest, CommandResult

log = logging.getLogger("agentrt.tools")

MODE = "docker"
_KILL_ATTEMPTS = 4
_EXIT_POLL_SECONDS = 5.0

Emit = Callable[[str, str], None]


@dataclass(eq=False)
class _Exec:
    """One command in flight."""

    container_id: str
    group: str
    mark: str
    done: asyncio.Future[BaseException | None]
    stopped: bool = False
    stream: Any = field(default=None, repr=False)


class DockerSandbox:
    """Runs commands in sandbox containers and manages them (see the module docstring)."""

    mode = MODE

    def __init__(self, settings: DockerSettings, max_progress_bytes: int) -> None:
        """Create the backend; the engine is contacted on first use only.

        Args:
            settings: engine address, default image, owner label, container limits.
            max_progress_bytes: progress streamed per command, bytes.
        """
        self.settings = settings
        self.engine = Engine(settings)
        self.max_progress_bytes = max_progress_bytes
        self._running: set[_Exec] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    # -- lifecycle (by name, ownership checked in docker/engine.py) ------------------------

    def lock(self, name: str) -> asyncio.Lock:
        """Return the lock serializing lifecycle calls on one container name in this process."""
        return self._locks.setdefault(name, asyncio.Lock())

    async def ensure(self, spec: ContainerSpec) -> str:
        """Adopt or replace the sandbox's container and return its id (see Engine.ensure).

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_FOREIGN or SANDBOX_UNAVAILABLE.
        """
        async with self.lock(spec.name):
            return await self.engine.ensure(spec)

    async def state(self, name: str, tenant: str, sandbox_id: str) -> str:
        """Return "absent" | "stopped" | "running" from the engine (004 §2.7p).

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_FOREIGN or SANDBOX_UNAVAILABLE.
        """
        return await self.engine.state(name, tenant, sandbox_id)

    async def stop(self, name: str, tenant: str, sandbox_id: str) -> None:
        """Stop the container: its commands end `stopped`, its filesystem is kept (004 §2.7p).

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_FOREIGN or SANDBOX_UNAVAILABLE.
        """
        async with self.lock(name):
            await self.engine.resolve(name, tenant, sandbox_id)  # refuse a foreign name first
            self.kill_group(f"{tenant}/{sandbox_id}")
            await self.engine.stop(name, tenant, sandbox_id)

    async def remove(self, name: str, tenant: str, sandbox_id: str) -> None:
        """Remove the container (its commands end `stopped`); none at the name is fine.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_FOREIGN or SANDBOX_UNAVAILABLE.
        """
        async with self.lock(name):
            await self.engine.resolve(name, tenant, sandbox_id)
            self.kill_group(f"{tenant}/{sandbox_id}")
            await self.engine.remove(name, tenant, sandbox_id)

    def kill_group(self, group: str) -> int:
        """Mark a sandbox's running commands as stopped (the container's end kills them)."""
        victims = [r for r in self._running if group and r.group == group]
        for run in victims:
            run.stopped = True
        return len(victims)

    def runner_for(self, container_id: str) -> ContainerRunner:
        """Return the runner of one sandbox container."""
        return ContainerRunner(self, container_id)

    async def close(self) -> None:
        """Kill every running command (service shutdown; bounded) and close the engine."""
        runs = list(self._running)
        if runs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*(self._kill(r) for r in runs)), 5.0)
        await self.engine.close()

    # -- running ------------------------------------------------------------------------

    async def run_in(
        self, container_id: str, req: CommandRequest, *, emit: Emit | None, deadline: float | None
    ) -> CommandResult:
        """Run one command in a container; the contract of `LocalSandbox.run`.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_STOPPED (the container is not running),
                SANDBOX_UNAVAILABLE (gone, or the engine is unreachable).
            CallerDeadline: the caller's deadline came first (the command was killed).
            asyncio.CancelledError: the caller went away (the command was killed).
        """
        loop = asyncio.get_running_loop()
        capture = CappedOutput(req.max_output_bytes)
        progress = ProgressBudget(emit, self.max_progress_bytes)
        started = time.monotonic()
        mark = secrets.token_hex(12)
        rel = os.path.relpath(req.workdir, req.workspace.path)
        workdir = WORKSPACE if rel == "." else f"{WORKSPACE}/{rel}"
        argv = [HELPER, "--run", mark, "bash", "-c", req.command]
        try:
            created = await self.engine.call(
                lambda api: api.exec_create(
                    container_id, argv, environment=dict(req.env) or None, workdir=workdir
                )
            )
        except docker.errors.NotFound:
            raise precondition(
                Reason.SANDBOX_UNAVAILABLE,
                "the sandbox's container is gone; CreateSandbox creates it again",
            ) from None
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise precondition(
                    Reason.SANDBOX_STOPPED,
                    "the sandbox's container is not running; CreateSandbox resumes it",
                ) from None
            raise precondition(Reason.SANDBOX_UNAVAILABLE, f"the docker engine refused: {exc}") from None
        exec_id: str = created["Id"]
        run = _Exec(container_id, req.group, mark, loop.create_future())

        def feed(stream: str, data: bytes) -> None:
            capture.feed(data)
            progress.feed(stream, data)

        self._running.add(run)
        threading.Thread(
            target=self._pump, args=(exec_id, run, loop, feed), name="agentrt-docker-exec", daemon=True
        ).start()
        timed_out = False
        try:
            caller_left = None if deadline is None else deadline - loop.time()
            limit = req.timeout_seconds if caller_left is None else min(req.timeout_seconds, caller_left)
            await asyncio.wait({run.done}, timeout=max(0.0, limit))
            ended_early = not run.done.done()
            caller_first = ended_early and caller_left is not None and caller_left <= req.timeout_seconds
            if ended_early:
                await self._kill(run)
            if caller_first:
                raise CallerDeadline(capture.text())
            timed_out = ended_early
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._kill(run)), 10.0)
            raise
        finally:
            self._running.discard(run)
        code = await self._exit_code(exec_id, run, timed_out)
        return CommandResult(
            exit_code=code,
            timed_out=timed_out,
            stopped=run.stopped and not timed_out,
            output=capture.text(),
            truncated=capture.truncated,
            total_bytes=capture.total_bytes,
            duration_seconds=time.monotonic() - started,
        )

    def _pump(
        self, exec_id: str, run: _Exec, loop: asyncio.AbstractEventLoop, feed: Callable[[str, bytes], None]
    ) -> None:
        """Thread body: start the exec and forward its output to the loop until it ends."""
        error: BaseException | None = None
        try:
            stream = self.engine.api().exec_start(exec_id, stream=True, demux=True)
            run.stream = stream
            for out, err in stream:
                if out:
                    loop.call_soon_threadsafe(feed, "stdout", out)
                if err:
                    loop.call_soon_threadsafe(feed, "stderr", err)
        except Exception as exc:  # noqa: BLE001 - reported to the waiting coroutine
            error = exc
        finally:
            if run.stream is not None:
                with contextlib.suppress(Exception):
                    run.stream.close()
            with contextlib.suppress(RuntimeError):  # the loop is gone (shutdown)
                loop.call_soon_threadsafe(_settle, run.done, error)

    async def _kill(self, run: _Exec) -> None:
        """Make the keeper kill the command's whole tree; return once its exec has ended."""
        argv = [HELPER, "--kill", run.mark]
        for attempt in range(_KILL_ATTEMPTS):
            try:
                await self.engine.call(
                    lambda api: api.exec_start(api.exec_create(run.container_id, argv, user="0")["Id"])
                )
            except Exception:  # noqa: BLE001 - a stopped or gone container ends the exec by itself
                log.debug("kill exec in %s failed", run.container_id[:12], exc_info=True)
            # The keeper may not have started yet when the first kill looked for it: try again.
            finished, _ = await asyncio.wait({run.done}, timeout=0.5 * (attempt + 1))
            if finished:
                return
        log.warning("a docker command (mark %s) did not end after its kill; closing its stream", run.mark)
        if run.stream is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(run.stream.close)

    async def _exit_code(self, exec_id: str, run: _Exec, killed: bool) -> int:
        """Return the exec's exit status once the engine has it (137 when it never reports one)."""
        error = run.done.result() if run.done.done() else None
        end = time.monotonic() + _EXIT_POLL_SECONDS
        while True:
            try:
                info: dict[str, Any] = await self.engine.call(lambda api: api.exec_inspect(exec_id))
            except Exception:  # noqa: BLE001 - the verdict stands without the code
                return 137
            if not info.get("Running"):
                code = info.get("ExitCode")
                if code is None and error is not None and not killed and not run.stopped:
                    raise precondition(
                        Reason.SANDBOX_UNAVAILABLE, f"the command could not be started: {error}"
                    )
                return 137 if code is None else int(code)
            if time.monotonic() > end:
                # The output stream ended while the command runs on: never leave it behind.
                await self._kill(run)
                return 137
            await asyncio.sleep(0.01)


class ContainerRunner:
    """The command runner of one docker sandbox; `run` has `LocalSandbox.run`'s contract."""

    mode = MODE

    def __init__(self, backend: DockerSandbox, container_id: str) -> None:
        """Bind the backend to a container id."""
        self.backend = backend
        self.container_id = container_id

    def require(self) -> None:
        """Nothing to check up front: the engine's availability is answered per call."""

    async def run(self, req: CommandRequest, *, emit: Emit | None, deadline: float | None) -> CommandResult:
        """Run one command in the container (see `DockerSandbox.run_in`)."""
        return await self.backend.run_in(self.container_id, req, emit=emit, deadline=deadline)


def _settle(done: asyncio.Future[BaseException | None], error: BaseException | None) -> None:
    if not done.done():
        done.set_result(error)
