"""A run's sandbox in the tool phase (issue 11; 004 §2.7n–§2.7q; runs/lifecycle/sandboxes.py).

Before a turn's calls run, after `tools_started` is logged (so a drain cutting this wait
never loses the model's response), the executor makes sure of the run's sandbox: the first
batch of each executor asks CreateSandbox once (create or adopt; runs/sandboxes.ensure), later
batches reuse the id. A call the tool service refuses because the sandbox was stopped or
destroyed meanwhile (nothing ran) has it asked for again (`_regain_sandbox`, once for the
calls that found it lost together) and is sent once more (runs/loop/phases/batch.py).

When the sandbox cannot be had, no call of the batch starts: each is answered "Not
executed: the run's sandbox could not be created." and the turn is recorded as for a tool
service failing mid-batch, then the run fails (`sandbox_unavailable` when the tool service
refused the sandbox, the peer's kind when it could not be reached).
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.runs.lifecycle import sandboxes
from agentrt.runs.loop import failures
from agentrt.runs.loop.core import ExecutorCore, b64
from agentrt.runs.loop.failures import RunFailed
from agentrt.runs.loop.phases.results import BatchResult, not_run
from agentrt.runs.loop.phases.tools import Planned
from agentrt.v1 import common_pb2 as cpb


class SandboxSteps(ExecutorCore):
    """The executor's part of a run's sandbox (see the module docstring)."""

    def _sandbox_lost(
        self,
        turn: int,
        planned: list[Planned],
        err: BaseException,
        on_result: Callable[[cpb.ToolResult], None],
    ) -> BatchResult:
        """The batch of a turn whose sandbox could not be had: every call not executed, err ends the run."""
        batch = not_run(planned, err, "the run's sandbox could not be created", on_result)
        self._defer(
            "tools_finished",
            {"turn": turn, "results": [b64(x) for x in batch.results]},
            tool_calls=self.r.tool_calls,
        )
        return batch

    async def _regain_sandbox(self) -> None:
        """Ask for the run's sandbox again: someone stopped or destroyed it.

        Calls of one batch that find it lost together share one CreateSandbox.

        Raises:
            RunFailed: kind `sandbox_unavailable` when the tool service refuses it now.
        """
        seen = self._sandbox_asks
        async with self._sandbox_lock:
            if self._sandbox_asks == seen:  # nobody asked again since this call found it lost
                self._sandbox_id = None
                await self._sandbox()

    async def _sandbox(self) -> str:
        """Return the run's sandbox id, created or adopted once per executor ("" = none).

        Raises:
            RunFailed: kind `sandbox_unavailable` when the tool service refuses the sandbox.
            Interrupted: a stop came while the sandbox was being created.
        """
        if self._sandbox_id is None and sandboxes.sandbox_of(self.r) is None:
            self._sandbox_id = ""  # no sandbox: nothing to wait for
        if self._sandbox_id is None:
            try:
                self._sandbox_id = await self._interruptible(sandboxes.ensure(self.deps.peers, self.r))
                self._sandbox_asks += 1
            except sandboxes.SandboxRefused as refused:
                err = refused.error
                raise RunFailed(
                    failures.failure(
                        "sandbox_unavailable",
                        f"The run's sandbox could not be created: {err.message}",
                        debug=str(err),
                        reason=str(err.reason),
                    )
                ) from err
        return self._sandbox_id
