"""Running one tool call, exactly once per (tenant, run_id, call_id, attempt) (DESIGN "A run, end to end" 3).

The journal protocol:
- A FINISHED record answers every repeat of the call (replayed=True); a call with side
  effects never runs twice.
- A call with side effects records STARTED before it runs and FINISHED with its result
  after. Read-only calls (read_file, list_files, task_status) skip STARTED and record
  FINISHED once: running one twice is harmless, and the hot path saves a transaction. So
  does an exec_command refused by its own arguments (NUL characters included) or a
  command policy: it is decided before anything is journaled, and nothing runs.
- The file tools (read_file, list_files) do not read the journal before they run either:
  the FINISHED insert is the lookup (decision 0017). A record already under the key (a
  repeat, a cancel's tombstone, another call) makes the insert lose, and its answer (or
  CALL_ID_REUSED) is returned; a repeat that cannot run now is answered from the record.
- A call outlives its caller: it runs as a task of the executor, and the request only
  listens. When the caller goes away (its process dies, its connection drops, it cancels
  the RPC) the command runs to its end and is journaled; a repeat of the same key
  attaches to it (its output chunks too) and gets the real result. Writing STARTED and
  starting the command are the executor's too (a shielded task), so a caller gone while
  STARTED is written never leaves a record with no command behind it.
- A STARTED record whose owner is gone (a dead process on this host, or no heartbeat for
  three periods) is closed as INTERRUPTED (SERVICE_STOPPED): the outcome is unknown, and
  the run loop applies seed 000's interruption rule. One still heartbeating elsewhere
  answers ABORTED/EXECUTION_IN_PROGRESS with a retry delay.
- Only the caller's deadline or an explicit cancel (CancelExecution: here, or on another
  process through `cancel_requested`, seen at its heartbeat) kills the command. Either is
  journaled INTERRUPTED (CALLER_DEADLINE / CALLER_CANCELLED), never TIMED_OUT (004 §2.7m).
  A cancel that comes before the call journals it NOT_EXECUTED, so it never starts; so does
  one that comes while its STARTED record is written or before its task's first step
  (decision 0053). A service shutdown lets calls end within what is left of its drain
  (AGENTRT_DRAIN_SECONDS, counted from the stop), then kills them (SERVICE_STOPPED); one that
  had not started yet leaves no record.
Tool failures the model can fix (bad arguments, paths outside the workspace, non-zero
exits) are results with is_error; MeshErrors are for the caller's mistakes and for
infrastructure (an unavailable sandbox), and leave no record.

The modules: request.py (the request and its checks), journal.py (answering from the
records, orphans, heartbeats, CancelExecution), flight.py (a call outliving its caller),
dispatch.py (the tools' implementations and exec_command's outcome).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.tools.calls import args as A
from agentrt.tools.calls.args import ArgError
from agentrt.tools.calls.catalog import EXEC_COMMAND, TASK_TOOL_NAMES, ToolDef
from agentrt.tools.calls.results import Outcome, interrupted, not_executed, refused
from agentrt.tools.config import ToolsConfig
from agentrt.tools.execution.dispatch import Dispatch, require_writable
from agentrt.tools.execution.flight import Flight
from agentrt.tools.execution.journal import Journal
from agentrt.tools.execution.observe import ToolObserver
from agentrt.tools.execution.request import Emit, ExecuteInput, checked_key, fingerprint, validate
from agentrt.tools.execution.tasks import TaskTools
from agentrt.tools.identity import process_identity
from agentrt.tools.sandbox.local import LocalSandbox
from agentrt.tools.sandbox.manager import SandboxManager
from agentrt.tools.sandbox.spec import CallerDeadline, ExecContext
from agentrt.tools.shell.pool import Shells
from agentrt.tools.storage.store import CallKey, ToolStore

log = logging.getLogger("agentrt.tools")

#: How long a shutdown waits for killed calls to be journaled, in seconds.
_KILL_GRACE_SECONDS = 5.0
#: The cancel reason of a shutdown (`close`).
_STOPPED = "the tool service stopped while it ran"


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
        self.owner = process_identity()
        self.journal = Journal(store, self.owner, config.heartbeat_seconds)
        #: Calls whose STARTED record is being written (see `_execute`; kept from GC).
        self._beginning: set[asyncio.Task[bool]] = set()
        self.shells = Shells(config, runner)  # exec_command's named shells (004 §2.7k)
        self.dispatch = Dispatch(config, runner, self.shells, self.observer, task_tools)
        sandboxes.on_release.append(self.shells.close_group)

    async def close(self, grace_seconds: float) -> None:
        """Service shutdown: let calls in flight end within the grace, then kill and journal them.

        A call killed here is journaled INTERRUPTED (SERVICE_STOPPED), so a repeat answers
        from the record; one that had not started loses its STARTED record, so a repeat runs
        it (`_end_unrun`). Then the named shells close for good.

        Args:
            grace_seconds: how long calls in flight may still run, seconds (the server gives
                what is left of its drain, `MeshServer.drain_left_seconds`); 0 kills at once.
        """
        flights = [f for f in self.journal.inflight.values() if not f.done.done()]
        if flights:
            await asyncio.wait([f.done for f in flights], timeout=grace_seconds)
            for flight in flights:
                if not flight.done.done():
                    flight.cancel(_STOPPED)
            await asyncio.wait([f.done for f in flights], timeout=_KILL_GRACE_SECONDS)
        await self.shells.close()

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
            MeshError: see `request.validate` and `SandboxManager.context_for`; INVALID_ARGUMENT/
                CALL_ID_REUSED for a different call under a used key; FAILED_PRECONDITION/
                SANDBOX_UNAVAILABLE, WORKSPACE_NOT_WRITABLE (exec_command in a root-owned
                directory the service did not create); ABORTED/EXECUTION_IN_PROGRESS; DEADLINE_EXCEEDED/
                CALLER_DEADLINE when the caller's deadline ended the command.
            asyncio.CancelledError: the request went away; the call itself runs on.
        """
        validate(inp)  # before the span: its name is the tool's
        call = inp.call
        async with self.observer.tool_call(inp.run_id, call.name, call.call_id, call.arguments) as record:
            outcome, replayed = await self._execute(tenant, inp, deadline, emit)
            record.done(outcome, replayed)
            return outcome, replayed

    async def _execute(
        self, tenant: str, inp: ExecuteInput, deadline: float | None, emit: Emit | None
    ) -> tuple[Outcome, bool]:
        """`execute`'s body, inside the call's span."""
        tool = validate(inp)
        key = CallKey(tenant, inp.run_id, inp.call.call_id, inp.attempt)
        fp = fingerprint(inp.call)
        if key in self.journal.inflight:
            return await self.journal.join(key, fp, emit), True
        if tool.read_only and tool.name not in TASK_TOOL_NAMES:
            return await self._file_read(tenant, key, fp, tool, inp, deadline, emit)
        record = await self.store.get(key)
        if record is not None:
            return await self.journal.answer_from(record, fp, emit), True
        ctx = await self._context(tenant, inp)
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
                early = self.dispatch.exec_refusal(A.decode_object(inp.call), inp)
            except ArgError as exc:
                early = refused(str(exc), "INVALID_ARGUMENTS")
            if early is not None:
                self.observer.refused_command(backend)
            if early is None and ctx.runner is None:
                require_writable(ctx)
        if tool.read_only or early is not None:
            outcome = early or await self.dispatch.run(tool, inp, ctx, deadline, emit)
            return await self._record(tenant, key, fp, tool, outcome, emit)
        if key in self.journal.inflight:  # another request got here while we looked
            return await self.journal.join(key, fp, emit), True
        # Reserve before the STARTED insert commits, so a repeat arriving meanwhile joins
        # this run instead of reading a record that looks orphaned.
        flight = Flight(fp)
        self.journal.inflight[key] = flight

        async def begin() -> bool:
            # Owned by the executor, not the request: a caller gone while STARTED is being
            # written (its process killed, its RPC cancelled) must not leave a STARTED record
            # with no command behind it, which the next attempt would close as "the tool
            # service stopped while it ran" for a command that never started.
            try:
                won = await self.store.start(key, tool.name, fp, self.owner)
            except BaseException:
                self.journal.inflight.pop(key, None)
                flight.not_run()
                raise
            if not won:
                self.journal.inflight.pop(key, None)
                flight.not_run()
                return False
            # flight.task is set by the task itself, on its first step (flight.py).
            asyncio.create_task(self._run_journaled(key, flight, tool, inp, ctx, deadline))
            return True

        beginning = asyncio.create_task(begin())
        self._beginning.add(beginning)
        beginning.add_done_callback(self._beginning.discard)
        if not await asyncio.shield(beginning):
            return await self._answer_recorded(key, fp, emit), True
        return await flight.result(emit), False

    async def _context(self, tenant: str, inp: ExecuteInput) -> ExecContext:
        """The call's sandbox context, with the tenant its named shells are keyed by."""
        ctx = await self.sandboxes.context_for(tenant, inp.run_id, inp.sandbox_id, inp.workspace)
        return replace(ctx, tenant=tenant)

    async def _file_read(
        self,
        tenant: str,
        key: CallKey,
        fp: str,
        tool: ToolDef,
        inp: ExecuteInput,
        deadline: float | None,
        emit: Emit | None,
    ) -> tuple[Outcome, bool]:
        """A read-only file tool (read_file, list_files): run it, then record it (decision 0017).

        No journal read first: the FINISHED insert is the lookup. When a record already
        holds the key (a repeat, a cancel's tombstone, another call under it) the insert
        loses and the answer comes from that record, so a repeat still gets the first
        answer; the re-read it did meanwhile changed nothing. When the call cannot run now
        (its sandbox is gone, a MeshError), a repeat is still answered from its record.
        The task tools are excluded: task_status places a delivery hold when it runs.
        """
        try:
            ctx = await self._context(tenant, inp)
            outcome = await self.dispatch.run(tool, inp, ctx, deadline, emit)
        except MeshError:
            record = await self.store.get(key)
            if record is None:
                raise
            return await self.journal.answer_from(record, fp, emit), True
        return await self._record(tenant, key, fp, tool, outcome, emit)

    async def _record(
        self, tenant: str, key: CallKey, fp: str, tool: ToolDef, outcome: Outcome, emit: Emit | None
    ) -> tuple[Outcome, bool]:
        """Journal a call that records FINISHED once; a record already there answers instead."""
        if await self.store.record(key, tool.name, fp, self.owner, outcome):
            await self._journaled(tenant, outcome)
            return outcome, False
        return await self._answer_recorded(key, fp, emit), True

    async def _answer_recorded(self, key: CallKey, fp: str, emit: Emit | None) -> Outcome:
        """Answer from the call's record (a repeat, or a save that lost the race).

        Raises:
            MeshError: ABORTED/EXECUTION_IN_PROGRESS when the record is gone again (a race
                with a cleanup); the caller retries.
        """
        record = await self.store.get(key)
        if record is None:
            raise MeshError(
                Status.ABORTED,
                Reason.EXECUTION_IN_PROGRESS,
                "the call's record changed; retry",
                retry_after_seconds=0.1,
            )
        return await self.journal.answer_from(record, fp, emit)

    async def _run_journaled(
        self,
        key: CallKey,
        flight: Flight,
        tool: ToolDef,
        inp: ExecuteInput,
        ctx: ExecContext,
        deadline: float | None,
    ) -> None:
        """Run the call to its end and journal it; owned by the executor, not a request."""
        flight.task = asyncio.current_task()  # published by itself (flight.py, decision 0053)
        if flight.cancel_reason:
            await self._end_unrun(key, flight)
            return
        beats = tool is EXEC_COMMAND or tool.name in TASK_TOOL_NAMES
        beat = asyncio.create_task(self.journal.heartbeat(key, flight)) if beats else None
        try:
            try:
                outcome = await self.dispatch.run(tool, inp, ctx, deadline, flight.emit)
            except CallerDeadline as exc:
                ended = interrupted("the caller's deadline passed while it ran", "CALLER_DEADLINE")
                ended.details["partial_output"] = exc.output
                await self.journal.finish(key, ended)
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
                if flight.cancel_reason == _STOPPED:
                    ended = interrupted(flight.cancel_reason, "SERVICE_STOPPED")
                else:
                    ended = interrupted(flight.cancel_reason or "it was cancelled", "CALLER_CANCELLED")
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self.journal.finish(key, ended))
                flight.done.set_result(ended)
                return
            except MeshError as err:
                # Infrastructure refused before anything ran: leave no record.
                await self.store.abandon(key, self.owner)
                flight.done.set_exception(err)
                return
            except Exception as exc:  # noqa: BLE001 - journaled, then the requests get it
                log.exception("call %s/%s failed in the tool service", key.run_id, key.call_id)
                failed = interrupted("the tool service failed while it ran", "INTERNAL")
                await self.journal.finish(key, failed)
                flight.done.set_exception(exc)
                return
            await self.journal.finish(key, outcome)
            await self._journaled(key.tenant, outcome)
            flight.done.set_result(outcome)
        finally:
            if beat is not None:
                beat.cancel()
            self.journal.inflight.pop(key, None)
            if not flight.done.done():
                flight.not_run()

    async def _end_unrun(self, key: CallKey, flight: Flight) -> None:
        """End a call cancelled before its body's first step: it never ran (decision 0053).

        A cancel journals it NOT_EXECUTED (CANCELLED), as a cancel that came before the call
        does; a shutdown deletes its STARTED record, so a repeat runs it (on another replica),
        and its requests get UNAVAILABLE/SANDBOX_UNAVAILABLE.
        """
        try:
            if flight.cancel_reason == _STOPPED:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self.store.abandon(key, self.owner))
                flight.done.set_exception(
                    MeshError(
                        Status.UNAVAILABLE,
                        Reason.SANDBOX_UNAVAILABLE,
                        "the tool service stopped before the call started; retry",
                        retry_after_seconds=1.0,
                    )
                )
            else:
                ended = not_executed(flight.cancel_reason)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self.journal.finish(key, ended))
                flight.done.set_result(ended)
        finally:
            self.journal.inflight.pop(key, None)
            if not flight.done.done():
                flight.not_run()

    async def _journaled(self, tenant: str, outcome: Outcome) -> None:
        """After a call's outcome is journaled: a task result it hands the model is delivered."""
        if self.task_tools is not None:
            await self.task_tools.acknowledge(tenant, outcome)

    async def get_execution(
        self, tenant: str, run_id: str, call_id: str, attempt: int = 0
    ) -> tuple[str, Outcome | None]:
        """Return (state, outcome) of a call's record: "absent", "started" or "finished".

        A STARTED record is reported as it stands; ExecuteTool is what resolves an orphan.

        Raises:
            MeshError: INVALID_ARGUMENT/MISSING_FIELD, INVALID_ID or INVALID_VALUE (attempt).
        """
        return await self.journal.state(checked_key(tenant, run_id, call_id, attempt))

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
        key = checked_key(tenant, run_id, call_id, attempt)
        return await self.journal.cancel(key, reason[:256] or "it was cancelled")
