"""Running one tool call, exactly once per (tenant, run_id, call_id, attempt) (DESIGN "A run, end to end" 3).

The journal protocol:
- A FINISHED record answers every repeat of the call (replayed=True); it never runs twice.
- A call with side effects records STARTED before it runs and FINISHED with its result
  after. Read-only calls (read_file, list_files) skip STARTED and record FINISHED once:
  running one twice is harmless, and the hot path saves a transaction. So does an
  exec_command refused by its own arguments (NUL characters included) or a command
  policy: it is decided before anything is journaled, and nothing runs.
- A call outlives its caller: it runs as a task of the executor, and the request only
  listens. When the caller goes away (its process dies, its connection drops, it cancels
  the RPC) the command runs to its end and is journaled; a repeat of the same key
  attaches to it (its output chunks too) and gets the real result.
- A STARTED record whose owner is gone (a dead process on this host, or no heartbeat for
  three periods) is closed as INTERRUPTED (SERVICE_STOPPED): the outcome is unknown, and
  the run loop applies seed 000's interruption rule. One still heartbeating elsewhere
  answers ABORTED/EXECUTION_IN_PROGRESS with a retry delay.
- Only the caller's deadline or an explicit cancel (CancelExecution: here, or on another
  process through `cancel_requested`, seen at its heartbeat) kills the command. Either is
  journaled INTERRUPTED (CALLER_DEADLINE / CALLER_CANCELLED), never TIMED_OUT (004 §2.7m).
  A cancel that comes before the call journals it NOT_EXECUTED, so it never starts. A
  service shutdown lets calls end within its grace, then kills them (SERVICE_STOPPED).
Tool failures the model can fix (bad arguments, paths outside the workspace, non-zero
exits) are results with is_error; MeshErrors are for the caller's mistakes and for
infrastructure (an unavailable sandbox), and leave no record.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from agentrt.core.errors import MeshError, Reason, Status, invalid, missing, precondition, quote
from agentrt.core.ids import valid_id
from agentrt.core.policy import CommandPolicy, check_exec_args
from agentrt.tools import args as A
from agentrt.tools import files
from agentrt.tools.args import ArgError, CallInput
from agentrt.tools.catalog import BY_NAME, EXEC_COMMAND, TASK_TOOL_NAMES, ToolDef
from agentrt.tools.config import ToolsConfig
from agentrt.tools.execution.observe import ToolObserver
from agentrt.tools.execution.tasks import TaskTools
from agentrt.tools.patch import apply_patch
from agentrt.tools.paths import PathRefused, resolve_dir
from agentrt.tools.results import Outcome, ResultStatus, interrupted, refused
from agentrt.tools.sandbox.local import LocalSandbox
from agentrt.tools.sandbox.manager import SandboxManager
from agentrt.tools.sandbox.spec import CallerDeadline, CommandRequest, ExecContext, Runner
from agentrt.tools.shell.pool import Shells
from agentrt.tools.store import FINISHED, STARTED, CallKey, ExecRecord, ToolStore, utcnow

log = logging.getLogger("agentrt.tools")

Emit = Callable[[str, str], None]
MAX_OUTPUT_CEILING = 4 * 1024 * 1024
#: Highest execution attempt a caller may ask for (ExecuteToolRequest.attempt).
MAX_ATTEMPT = 1000
#: How long a shutdown waits for killed calls to be journaled, in seconds.
_KILL_GRACE_SECONDS = 5.0


class _NotRun(Exception):
    """The attempt a request joined never ran (refused, or lost the race to another process)."""


def _not_run() -> _NotRun:
    return _NotRun()


def _check_attempt(attempt: int) -> None:
    if not 0 <= attempt <= MAX_ATTEMPT:
        raise invalid(Reason.INVALID_VALUE, f"attempt must be 0..{MAX_ATTEMPT}", field="attempt")


def _checked_key(tenant: str, run_id: str, call_id: str, attempt: int) -> CallKey:
    for name, value in (("run_id", run_id), ("call_id", call_id)):
        if not value:
            raise missing(name)
        if not valid_id(value):
            raise invalid(Reason.INVALID_ID, f"malformed {name} {quote(value)}", field=name)
    _check_attempt(attempt)
    return CallKey(tenant, run_id, call_id, attempt)


@dataclass(frozen=True)
class ExecuteInput:
    """An ExecuteTool request in domain terms.

    Attributes:
        run_id: the run; with call.call_id, the idempotency key.
        call: the call with its exact argument string.
        sandbox_id: the sandbox to run in, "" for none.
        workspace: absolute workspace directory when no sandbox ("" = the run's default).
        timeout_seconds: per-call timeout, seconds; 0 = the tool's default.
        max_output_bytes: output cap, bytes; 0 = the service default.
        command_policies: exec_command's policies, each of which a command must pass
            (the service's own, then the request's; 004 §2.7j).
        attempt: which execution of the call (0 = the first; a re-run is its own record).
    """

    run_id: str
    call: CallInput
    sandbox_id: str = ""
    workspace: str = ""
    timeout_seconds: float = 0.0
    max_output_bytes: int = 0
    command_policies: tuple[CommandPolicy, ...] = ()
    attempt: int = 0


def _process_identity() -> str:
    try:
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "0"
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{start}:{secrets.token_hex(4)}"


def _owner_dead(owner: str) -> bool:
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


def _require_writable(ctx: ExecContext) -> None:
    """Refuse commands where their uid cannot write: a root-owned directory the service did not create.

    Raises:
        MeshError: FAILED_PRECONDITION/WORKSPACE_NOT_WRITABLE (field workspace).
    """
    ws = ctx.workspace
    if not ws.writable:
        raise precondition(
            Reason.WORKSPACE_NOT_WRITABLE,
            f"workspace {ws.path!r} belongs to root and was not created by the tool service, so its "
            f"commands (run as uid {ws.uid}) cannot write in it, and the service never changes the owner of "
            "a directory it did not create: chown it to the user commands should run as, or name a "
            "directory that does not exist yet (the service creates it)",
            field="workspace",
        )


def fingerprint(call: CallInput) -> str:
    """Hash of what makes a call this call: its tool and exact arguments."""
    data = json.dumps([call.name, call.arguments, call.invalid_arguments, call.invalid_arguments_base64])
    return hashlib.sha256(data.encode()).hexdigest()


class _Flight:
    """One journaled call running in this process: its task, its result, who listens.

    The task belongs to the executor, not to a request: a request that goes away (its
    caller died, its connection dropped) stops listening and the call runs on to its end.
    """

    def __init__(self, fp: str) -> None:
        self.fingerprint = fp
        self.done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        # A failure nobody awaits any more is not news: mark it retrieved.
        self.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.task: asyncio.Task[None] | None = None
        self.emitters: list[Emit] = []
        #: Why the call was cancelled on purpose ("" = it was not).
        self.cancel_reason = ""

    def emit(self, stream: str, text: str) -> None:
        for sink in list(self.emitters):
            sink(stream, text)

    async def result(self, emit: Emit | None) -> Outcome:
        """Wait for the call's outcome, passing its output chunks to emit meanwhile."""
        if emit is not None:
            self.emitters.append(emit)
        try:
            return await asyncio.shield(self.done)
        finally:
            if emit is not None and emit in self.emitters:
                self.emitters.remove(emit)


class ToolExecutor:
    """Executes calls through the journal (see the module docstring)."""

    def __init__(
        self,
        config: ToolsConfig,
        store: ToolStore,
        runner: LocalSandbox,
        sandboxes: SandboxManager,
        observer: ToolObserver | None = None,
        task_tools: TaskTools | None = None,
    ) -> None:
        """Wire the executor to its journal, runner, sandbox manager, spans and metrics, and TaskService.

        observer: the spans and series (observe.py); a private ToolObserver when None.
        task_tools: the task tools' client of TaskService; None refuses their calls.
        """
        self.config = config
        self.observer = observer if observer is not None else ToolObserver()
        self.task_tools = task_tools
        self.store = store
        self.runner = runner
        self.sandboxes = sandboxes
        self.owner = _process_identity()
        self._inflight: dict[CallKey, _Flight] = {}
        self.shells = Shells(config, runner)  # exec_command's named shells (004 §2.7k)
        sandboxes.on_release.append(self.shells.close_group)

    async def close(self, grace_seconds: float = 5.0) -> None:
        """Service shutdown: let calls in flight end within the grace, then kill and journal them.

        A call killed here is journaled INTERRUPTED (SERVICE_STOPPED), so a repeat answers
        from the record. Then the named shells close for good.
        """
        flights = [f for f in self._inflight.values() if f.task is not None]
        if flights:
            await asyncio.wait([f.done for f in flights], timeout=grace_seconds)
            for flight in flights:
                if flight.task is not None and not flight.task.done():
                    flight.cancel_reason = "the tool service stopped while it ran"
                    flight.task.cancel()
            await asyncio.wait([f.done for f in flights], timeout=_KILL_GRACE_SECONDS)
        await self.shells.close()

    # -- validation ---------------------------------------------------------------------

    def validate(self, inp: ExecuteInput) -> ToolDef:
        """Check the request's shape and return its tool.

        Raises:
            MeshError: INVALID_ARGUMENT with MISSING_FIELD, INVALID_ID, INVALID_VALUE or UNKNOWN_TOOL.
        """
        if not inp.run_id:
            raise missing("run_id")
        if not valid_id(inp.run_id):
            raise invalid(Reason.INVALID_ID, f"malformed run_id {quote(inp.run_id)}", field="run_id")
        if not inp.call.call_id:
            raise missing("call.call_id")
        if not valid_id(inp.call.call_id):
            raise invalid(
                Reason.INVALID_ID, f"malformed call_id {quote(inp.call.call_id)}", field="call.call_id"
            )
        _check_attempt(inp.attempt)
        if not inp.call.name:
            raise missing("call.name")
        tool = BY_NAME.get(inp.call.name)
        if tool is None:
            raise invalid(
                Reason.UNKNOWN_TOOL,
                f"unknown tool {inp.call.name[:64]!r}; ListTools names the catalog",
                tool=inp.call.name[:64],
            )
        if inp.timeout_seconds < 0:
            raise invalid(Reason.INVALID_VALUE, "timeout must not be negative", field="timeout")
        if inp.max_output_bytes < 0:
            raise invalid(
                Reason.INVALID_VALUE, "max_output_bytes must not be negative", field="max_output_bytes"
            )
        return tool

    # -- the journal protocol -----------------------------------------------------------

    async def execute(
        self, tenant: str, inp: ExecuteInput, *, deadline: float | None = None, emit: Emit | None = None
    ) -> tuple[Outcome, bool]:
        """Run a call once, or answer it from the journal.

        Args:
            tenant: the caller's tenant.
            inp: the request.
            deadline: the caller's deadline on the event loop clock, None for none.
            emit: receives ("stdout"|"stderr", text) progress chunks (004 §2.7g), also
                when the request attaches to the call running for an earlier request.

        Returns:
            (outcome, replayed): replayed is True when the answer did not come from running
            the call in this request.

        Raises:
            MeshError: see `validate` and `SandboxManager.context_for`; INVALID_ARGUMENT/
                CALL_ID_REUSED for a different call under a used key; FAILED_PRECONDITION/
                SANDBOX_UNAVAILABLE, WORKSPACE_NOT_WRITABLE (exec_command in a root-owned
                directory the service did not create); ABORTED/EXECUTION_IN_PROGRESS; DEADLINE_EXCEEDED/
                CALLER_DEADLINE when the caller's deadline ended the command.
            asyncio.CancelledError: the request went away; the call itself runs on.
        """
        self.validate(inp)  # before the span: its name is the tool's
        call = inp.call
        async with self.observer.tool_call(inp.run_id, call.name, call.call_id, call.arguments) as record:
            outcome, replayed = await self._execute(tenant, inp, deadline, emit)
            record.done(outcome, replayed)
            return outcome, replayed

    async def _execute(
        self, tenant: str, inp: ExecuteInput, deadline: float | None, emit: Emit | None
    ) -> tuple[Outcome, bool]:
        """`execute`'s body, inside the call's span."""
        tool = self.validate(inp)
        key = CallKey(tenant, inp.run_id, inp.call.call_id, inp.attempt)
        fp = fingerprint(inp.call)
        if key in self._inflight:
            return await self._join(key, fp, emit), True
        record = await self.store.get(key)
        if record is not None:
            return await self._answer_from(record, fp, emit), True
        ctx = await self.sandboxes.context_for(tenant, inp.run_id, inp.sandbox_id, inp.workspace)
        ctx = replace(ctx, tenant=tenant)  # named shells are keyed by it
        early: Outcome | None = None
        if tool is EXEC_COMMAND:
            backend = (ctx.runner or self.runner).mode
            try:
                (ctx.runner or self.runner).require()
            except MeshError:
                self.observer.unavailable_command(backend)
                raise
            # Refused by its own arguments or a policy: nothing will run, so like a
            # read-only call it records FINISHED once and never STARTED.
            try:
                early = self._exec_refusal(A.decode_object(inp.call), inp)
            except ArgError as exc:
                early = refused(str(exc), "INVALID_ARGUMENTS")
            if early is not None:
                self.observer.refused_command(backend)
            if early is None and ctx.runner is None:
                _require_writable(ctx)
        if tool.read_only or early is not None:
            outcome = early or await self._run(tool, inp, ctx, deadline, emit)
            if await self.store.record(key, tool.name, fp, self.owner, outcome):
                await self._journaled(tenant, outcome)
                return outcome, False
            record = await self.store.get(key)
            return (record.outcome if record and record.outcome else outcome), True
        if key in self._inflight:  # another request got here while we looked
            return await self._join(key, fp, emit), True
        # Reserve before the STARTED insert commits, so a repeat arriving meanwhile joins
        # this run instead of reading a record that looks orphaned.
        flight = _Flight(fp)
        self._inflight[key] = flight
        try:
            won = await self.store.start(key, tool.name, fp, self.owner)
        except BaseException as exc:
            self._inflight.pop(key, None)
            flight.done.set_exception(_not_run())
            raise exc
        if not won:
            self._inflight.pop(key, None)
            flight.done.set_exception(_not_run())
            record = await self.store.get(key)
            if record is None:
                raise MeshError(
                    Status.ABORTED,
                    Reason.EXECUTION_IN_PROGRESS,
                    "the call's record changed; retry",
                    retry_after_seconds=0.1,
                )
            return await self._answer_from(record, fp, emit), True
        flight.task = asyncio.create_task(self._run_journaled(key, flight, tool, inp, ctx, deadline))
        return await flight.result(emit), False

    async def _run_journaled(
        self,
        key: CallKey,
        flight: _Flight,
        tool: ToolDef,
        inp: ExecuteInput,
        ctx: ExecContext,
        deadline: float | None,
    ) -> None:
        """Run the call to its end and journal it; owned by the executor, not a request."""
        beats = tool is EXEC_COMMAND or tool.name in TASK_TOOL_NAMES
        beat = asyncio.create_task(self._heartbeat(key, flight)) if beats else None
        try:
            try:
                outcome = await self._run(tool, inp, ctx, deadline, flight.emit)
            except CallerDeadline as exc:
                ended = interrupted("the caller's deadline passed while it ran", "CALLER_DEADLINE")
                ended.details["partial_output"] = exc.output
                await self._close(key, ended)
                flight.done.set_exception(
                    MeshError(
                        Status.DEADLINE_EXCEEDED,
                        Reason.CALLER_DEADLINE,
                        "the caller's deadline passed; the command was killed",
                    )
                )
                return
            except asyncio.CancelledError:
                # Only a cancel on purpose gets here (CancelExecution, a shutdown): a
                # request that went away does not cancel this task.
                if flight.cancel_reason.startswith("the tool service stopped"):
                    ended = interrupted(flight.cancel_reason, "SERVICE_STOPPED")
                else:
                    ended = interrupted(flight.cancel_reason or "it was cancelled", "CALLER_CANCELLED")
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self._close(key, ended))
                flight.done.set_result(ended)
                return
            except MeshError as err:
                # Infrastructure refused before anything ran: leave no record.
                await self.store.abandon(key, self.owner)
                flight.done.set_exception(err)
                return
            except Exception as exc:  # noqa: BLE001 - journaled, then the requests get it
                log.exception("call %s/%s failed in the tool service", key.run_id, key.call_id)
                await self._close(key, interrupted("the tool service failed while it ran", "INTERNAL"))
                flight.done.set_exception(exc)
                return
            await self._close(key, outcome)
            await self._journaled(key.tenant, outcome)
            flight.done.set_result(outcome)
        finally:
            if beat is not None:
                beat.cancel()
            self._inflight.pop(key, None)
            if not flight.done.done():
                flight.done.set_exception(_not_run())

    async def _journaled(self, tenant: str, outcome: Outcome) -> None:
        """After a call's outcome is journaled: a task result it hands the model is delivered."""
        if self.task_tools is not None:
            await self.task_tools.acknowledge(tenant, outcome)

    async def _close(self, key: CallKey, outcome: Outcome) -> None:
        if not await self.store.finish(key, self.owner, outcome):
            log.warning(
                "call %s/%s finished after its record was closed by another process", key.run_id, key.call_id
            )

    async def _join(self, key: CallKey, fp: str, emit: Emit | None) -> Outcome:
        flight = self._inflight[key]
        if flight.fingerprint != fp:
            raise invalid(
                Reason.CALL_ID_REUSED,
                "call_id was already used for a different call in this run",
                field="call.call_id",
            )
        try:
            return await flight.result(emit)
        except _NotRun:
            pass
        # The attempt we joined did not run (refused, or lost the race to another process).
        record = await self.store.get(key)
        if record is not None:
            return await self._answer_from(record, fp, emit)
        raise MeshError(
            Status.UNAVAILABLE,
            Reason.SANDBOX_UNAVAILABLE,
            "the concurrent attempt of this call could not run; retry",
            retry_after_seconds=1.0,
        )

    async def _answer_from(self, record: ExecRecord, fp: str, emit: Emit | None = None) -> Outcome:
        # A tombstone (a cancel that came before the call) has no fingerprint: any call matches.
        if record.fingerprint and record.fingerprint != fp:
            raise invalid(
                Reason.CALL_ID_REUSED,
                "call_id was already used for a different call in this run",
                field="call.call_id",
            )
        if record.state == FINISHED and record.outcome is not None:
            return record.outcome
        stale = 3 * self.config.heartbeat_seconds
        age = (utcnow() - record.heartbeat_at).total_seconds()
        if record.key in self._inflight:
            return await self._join(record.key, fp, emit)
        if record.owner == self.owner or _owner_dead(record.owner) or age > stale:
            ended = interrupted("the tool service stopped while it ran", "SERVICE_STOPPED")
            window = -1.0 if age <= stale else stale  # a dead owner needs no waiting
            if await self.store.claim_orphan(record.key, record.owner, window, ended):
                return ended
            again = await self.store.get(record.key)
            if again is not None and again.state == FINISHED and again.outcome is not None:
                return again.outcome
        raise MeshError(
            Status.ABORTED,
            Reason.EXECUTION_IN_PROGRESS,
            "the call is running in another tool service process; retry later",
            retry_after_seconds=self.config.heartbeat_seconds,
        )

    async def _heartbeat(self, key: CallKey, flight: _Flight) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            try:
                asked = await self.store.heartbeat(key, self.owner)
            except Exception:  # noqa: BLE001 - a missed beat only ages the record
                log.warning("heartbeat of %s/%s failed", key.run_id, key.call_id, exc_info=True)
                continue
            if asked and flight.task is not None and not flight.cancel_reason:
                flight.cancel_reason = "it was cancelled by request"
                flight.task.cancel()

    async def get_execution(
        self, tenant: str, run_id: str, call_id: str, attempt: int = 0
    ) -> tuple[str, Outcome | None]:
        """Return (state, outcome) of a call's record: "absent", "started" or "finished".

        A STARTED record is reported as it stands; ExecuteTool is what resolves an orphan.

        Raises:
            MeshError: INVALID_ARGUMENT/MISSING_FIELD, INVALID_ID or INVALID_VALUE (attempt).
        """
        key = _checked_key(tenant, run_id, call_id, attempt)
        record = await self.store.get(key)
        if record is None:
            return "absent", None
        return (FINISHED, record.outcome) if record.state == FINISHED else (STARTED, None)

    async def cancel_execution(
        self, tenant: str, run_id: str, call_id: str, attempt: int = 0, reason: str = ""
    ) -> tuple[str, Outcome | None]:
        """Kill a call that runs, or make sure it never starts (CancelExecution).

        Returns:
            (state, outcome): ("finished", outcome) when the record is closed here: the
            call's own result when it had ended, INTERRUPTED (CALLER_CANCELLED) when it was
            killed, NOT_EXECUTED when it had not started (recorded, so a late ExecuteTool
            answers from it); ("started", None) when it runs in another process, which
            kills it at its next heartbeat.

        Raises:
            MeshError: INVALID_ARGUMENT/MISSING_FIELD, INVALID_ID or INVALID_VALUE.
        """
        key = _checked_key(tenant, run_id, call_id, attempt)
        why = reason[:256] or "it was cancelled"
        flight = self._inflight.get(key)
        if flight is not None and flight.task is not None:
            flight.cancel_reason = flight.cancel_reason or why
            flight.task.cancel()
            with contextlib.suppress(Exception):
                await flight.result(None)
        record = await self.store.get(key)
        if record is None:
            tombstone = refused(f"The call was not executed: {why} before it started.", "CANCELLED")
            tombstone.status = ResultStatus.NOT_EXECUTED
            if await self.store.record(key, "", "", self.owner, tombstone):
                return FINISHED, tombstone
            record = await self.store.get(key)
        if record is None:
            return "absent", None
        if record.state == FINISHED:
            return FINISHED, record.outcome
        age = (utcnow() - record.heartbeat_at).total_seconds()
        if _owner_dead(record.owner) or age > 3 * self.config.heartbeat_seconds:
            ended = interrupted(why, "CALLER_CANCELLED")
            if await self.store.claim_orphan(key, record.owner, -1.0, ended):
                return FINISHED, ended
        await self.store.request_cancel(key)
        return STARTED, None

    # -- running ------------------------------------------------------------------------

    async def _run(
        self, tool: ToolDef, inp: ExecuteInput, ctx: ExecContext, deadline: float | None, emit: Emit | None
    ) -> Outcome:
        started = time.monotonic()
        cap = min(inp.max_output_bytes or self.config.max_output_bytes, MAX_OUTPUT_CEILING)
        cap = max(cap, 256)
        ws = ctx.workspace
        try:
            args = A.decode_object(inp.call)
            if tool is EXEC_COMMAND:
                outcome = await self._exec_command(args, inp, ctx, cap, deadline, emit)
            elif tool.name in TASK_TOOL_NAMES:
                outcome = await self._task_tool(ctx.tenant, inp, args)
            elif tool.name == "read_file":
                outcome = await asyncio.to_thread(files.read_file, ws, args, cap)
            elif tool.name == "write_file":
                outcome = await asyncio.to_thread(files.write_file, ws, args)
            elif tool.name == "list_files":
                outcome = await asyncio.to_thread(files.list_files, ws, args)
            else:
                outcome = await asyncio.to_thread(apply_patch, ws, args)
        except ArgError as exc:
            outcome = refused(str(exc), "INVALID_ARGUMENTS")
        except PathRefused as exc:
            outcome = refused(f"{tool.name}: {exc}", exc.reason)
        except OSError as exc:
            outcome = refused(f"{tool.name}: {exc.strerror or exc}", "OS_ERROR")
        outcome.duration_seconds = time.monotonic() - started
        return outcome

    async def _task_tool(self, tenant: str, inp: ExecuteInput, args: dict) -> Outcome:
        if self.task_tools is None:
            return refused(
                f"{inp.call.name}: this tool service has no task service configured", "NO_TASK_SERVICE"
            )
        return await self.task_tools.run(tenant, inp.run_id, inp.call.call_id, inp.call.name, args)

    def _exec_refusal(self, args: dict, inp: ExecuteInput) -> Outcome | None:
        """Why exec_command refuses these decoded arguments (None: they may run).

        With the same check the run loop's approval gate uses, so a call the gate let skip
        approval is always refused here (004 §2.7j, §2.7l). It includes NUL characters,
        which no command line, directory or shell name can carry (INVALID_ARGUMENTS).
        """
        veto = check_exec_args(args, inp.command_policies)
        if veto is not None:
            facts = veto.details()
            denied = refused(veto.message, facts.pop("reason"), **facts)
            if veto.rule != "arguments":
                denied.status, denied.summary = ResultStatus.DENIED, f"refused by the {veto.origin} policy"
            return denied
        return None

    def _timeout(self, inp: ExecuteInput, timeout_ms: int | None) -> float:
        ceiling = inp.timeout_seconds or self.config.max_timeout_seconds
        if timeout_ms is not None:
            return min(timeout_ms / 1000.0, ceiling)
        return inp.timeout_seconds or EXEC_COMMAND.timeout_seconds or self.config.default_timeout_seconds

    async def _exec_command(
        self,
        args: dict,
        inp: ExecuteInput,
        ctx: ExecContext,
        cap: int,
        deadline: float | None,
        emit: Emit | None,
    ) -> Outcome:
        denied = self._exec_refusal(args, inp)
        if denied is not None:
            self.observer.refused_command((ctx.runner or self.runner).mode)
            return denied
        cmd = A.required_str(args, "cmd")
        workdir = A.optional_str(args, "workdir")
        timeout = self._timeout(inp, A.optional_int(args, "timeout_ms", 1))
        session = A.session_id(args)  # decoded even when shells are off, then ignored (§2.7k)
        host_workdir = await asyncio.to_thread(resolve_dir, ctx.workspace, workdir)
        if session and self.shells.enabled and ctx.runner is not None:
            # Named shells are local (bwrap) processes; a docker sandbox's commands run in its container.
            return refused(
                "exec_command: session_id is not available in this sandbox (docker); omit it to run the "
                "command in a fresh shell",
                "SESSION_UNSUPPORTED",
            )
        if session and self.shells.enabled:
            shell_dir = host_workdir if workdir else ""  # no workdir: the shell stays where it is
            return await self.observer.sandbox_command(
                backend=self.runner.mode,
                call_id=inp.call.call_id,
                cmd=cmd,
                shell=session,
                run=lambda: self.shells.exec_command(
                    ctx, session, cmd, shell_dir, timeout, cap, deadline=deadline, emit=emit
                ),
            )
        req = CommandRequest(cmd, ctx.workspace, host_workdir, ctx.env, timeout, ctx.limits, cap, ctx.group)
        runner = ctx.runner or self.runner  # the sandbox's backend (local or docker)
        return await self.observer.sandbox_command(
            backend=runner.mode,
            call_id=inp.call.call_id,
            cmd=cmd,
            run=lambda: self._fresh_command(runner, req, host_workdir, timeout, deadline, emit),
        )

    async def _fresh_command(
        self,
        runner: Runner,
        req: CommandRequest,
        host_workdir: str,
        timeout: float,
        deadline: float | None,
        emit: Emit | None,
    ) -> Outcome:
        """Run one command in a fresh shell of the sandbox; its result as the model sees it."""
        result = await runner.run(req, emit=emit, deadline=deadline)
        content = result.output
        sep = "\n" if content and not content.endswith("\n") else ""
        details = {
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "workdir": host_workdir,
            "output_bytes": result.total_bytes,
            "sandbox": runner.mode,
            "timeout_seconds": timeout,
        }
        outcome = Outcome(
            content=content,
            summary=f"exit 0 in {result.duration_seconds:.2f} s",
            details=details,
            exit_code=result.exit_code,
            output_truncated=result.truncated,
        )
        if result.timed_out:
            note, outcome.status = f"timed out after {timeout:g} s", ResultStatus.TIMED_OUT
            outcome.content += f"{sep}[{note}; the command and everything it started were killed]"
        elif result.stopped:
            note, outcome.status = "killed by StopSandbox", ResultStatus.ERROR
            outcome.content += f"{sep}[killed: the sandbox was stopped while the command ran]"
        elif result.exit_code != 0:
            note, outcome.status = f"exit {result.exit_code}", ResultStatus.ERROR
            outcome.content += f"{sep}[exit status {result.exit_code}]"
        else:
            return outcome
        outcome.is_error, outcome.summary = True, note
        return outcome
