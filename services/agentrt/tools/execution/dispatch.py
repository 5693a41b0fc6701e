"""Dispatch of one call to its tool's implementation, and what exec_command answers.

The file tools (read_file, write_file, list_files, apply_patch) run in process on a worker
thread, so the event loop never blocks on a disk; exec_command runs in a fresh shell of
the call's sandbox (local bubblewrap or docker) or, with a `session_id` and shells
enabled, in a named shell (004 §2.7k); the task tools call TaskService (004 §2.13).
Everything the model can fix is an is_error result here, never a MeshError: malformed
arguments (INVALID_ARGUMENTS), a path outside the workspace, an OS error, a command a
policy refuses (DENIED), a timeout (TIMED_OUT), a non-zero exit (ERROR).
"""

from __future__ import annotations

import asyncio
import time

from agentrt.core.errors import Reason, precondition
from agentrt.core.exec_args import check_exec_args
from agentrt.tools.calls import args as A
from agentrt.tools.calls.args import ArgError
from agentrt.tools.calls.catalog import EXEC_COMMAND, TASK_TOOL_NAMES, ToolDef
from agentrt.tools.calls.results import Outcome, ResultStatus, refused
from agentrt.tools.config import ToolsConfig
from agentrt.tools.execution.observe import ToolObserver
from agentrt.tools.execution.request import Emit, ExecuteInput
from agentrt.tools.execution.tasks import TaskTools
from agentrt.tools.files import ops
from agentrt.tools.files.patch import apply_patch
from agentrt.tools.files.paths import PathRefused, resolve_dir
from agentrt.tools.sandbox.local import LocalSandbox
from agentrt.tools.sandbox.spec import CommandRequest, ExecContext, Runner
from agentrt.tools.shell.pool import Shells

#: Linux's limit on one argument string (MAX_ARG_STRLEN, 32 pages), bytes with its NUL: a
#: one-shot command runs as `bash -c <cmd>`, so its text must fit in one argument.
MAX_ONE_SHOT_COMMAND_BYTES = 131072 - 1

MAX_OUTPUT_CEILING = 4 * 1024 * 1024


def require_writable(ctx: ExecContext) -> None:
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


class Dispatch:
    """Runs a validated call's tool and shapes its outcome (see the module docstring)."""

    def __init__(
        self,
        config: ToolsConfig,
        runner: LocalSandbox,
        shells: Shells,
        observer: ToolObserver,
        task_tools: TaskTools | None,
    ) -> None:
        """Dispatch with the local runner (calls without a docker sandbox), named shells and spans.

        task_tools: the task tools' client of TaskService; None refuses their calls.
        """
        self.config = config
        self.runner = runner
        self.shells = shells
        self.observer = observer
        self.task_tools = task_tools

    async def run(
        self, tool: ToolDef, inp: ExecuteInput, ctx: ExecContext, deadline: float | None, emit: Emit | None
    ) -> Outcome:
        """Run the call once and return its outcome, duration_seconds set (seconds, monotonic).

        Raises:
            MeshError: the sandbox's infrastructure refused before anything ran (e.g.
                FAILED_PRECONDITION/SANDBOX_UNAVAILABLE); the journal keeps no record of it.
            CallerDeadline: the caller's deadline ended the command (its partial output attached).
        """
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
                outcome = await asyncio.to_thread(ops.read_file, ws, args, cap)
            elif tool.name == "write_file":
                outcome = await asyncio.to_thread(ops.write_file, ws, args)
            elif tool.name == "list_files":
                outcome = await asyncio.to_thread(ops.list_files, ws, args)
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

    def exec_refusal(self, args: dict, inp: ExecuteInput) -> Outcome | None:
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
        denied = self.exec_refusal(args, inp)
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
        size = len(cmd.encode("utf-8", "surrogatepass"))
        if size > MAX_ONE_SHOT_COMMAND_BYTES:
            raise ArgError(
                f"exec_command: the command is {size} bytes; a command without session_id runs as "
                f"bash -c <cmd>, which Linux limits to {MAX_ONE_SHOT_COMMAND_BYTES} bytes. Write long "
                "content with write_file (or apply_patch) and run a short command, or pass a session_id "
                "to run it in a named shell."
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
