"""The phases of one turn: input, the model half, the tool phase, the save point (004 §2.1–§2.3a).

- `_model_turn`: render the context, stream the model (model_delta events are
  provisional), decide, log the response before anything acts on it (tool turns write it
  with the tool phase's first save, before any tool runs; its event is held until then);
  an overflow goes to `_recover_overflow`.
- `_tool_phase`: plan the calls; a call that waits pauses the whole turn; otherwise run
  them (runs/loop/phases/batch.py) while honouring a cancel, a shutdown and the time budget; a side
  effect the tool service's death interrupted suspends the run for a reconciliation.
- `_save_turn` (runs/loop/phases/savepoint.py): the session batch where its request was
  built (docs/decisions/0003), with the injected input it consumes and the turn's
  diagnostics, then the save point.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

from agentrt.core.decide import Decision, DecisionKind, decide, mint_call_id
from agentrt.core.errors import MeshError
from agentrt.mesh import telemetry
from agentrt.runs.convert.model import call_out, kind_out, response_in
from agentrt.runs.loop import failures, reconcile
from agentrt.runs.loop.core import Interrupted, b64
from agentrt.runs.loop.failures import ContextOverflow, RunFailed
from agentrt.runs.loop.persistence import (
    input_entry,
    repair_session,
    write_batch,
)
from agentrt.runs.loop.phases import child as child_phase
from agentrt.runs.loop.phases import disclosure as disclosure_phase
from agentrt.runs.loop.phases import model as turnmod
from agentrt.runs.loop.phases import structured as structured_phase
from agentrt.runs.loop.phases.batch import Abandoned, BatchStop, execute_calls
from agentrt.runs.loop.phases.guardrails import checks as guardrail_checks
from agentrt.runs.loop.phases.guardrails.steps import GuardrailSteps
from agentrt.runs.loop.phases.results import BatchResult
from agentrt.runs.loop.phases.sandbox import SandboxSteps
from agentrt.runs.loop.phases.savepoint import SavePointSteps
from agentrt.runs.loop.phases.tools import pending_calls, plan_calls
from agentrt.runs.observe import record_generation, record_request
from agentrt.runs.spec.agents import Limits, command_policies, offered_specs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: Why a killed tool batch ended, as its results say.
CANCELLED, OUT_OF_TIME = "run cancelled", "the run's time budget ran out"


class TurnSteps(SandboxSteps, GuardrailSteps, SavePointSteps):
    """The phases of a turn (see the module docstring)."""

    def _recorded_response(self, recorded: dict[str, dict[str, Any]]) -> cpb.ModelResponse | None:
        payload = recorded.get("model_responded")
        if payload is None:
            return None
        return cpb.ModelResponse.FromString(base64.b64decode(payload["response"]))

    def _decide(self, turn: int, response: cpb.ModelResponse) -> Decision:
        single = self.agent.tool_call_mode == pb.TOOL_CALL_MODE_SINGLE
        return decide(
            response_in(response), single_call=single, call_id=lambda i: mint_call_id(self.r.run_id, turn, i)
        )

    async def _repair(self) -> None:
        """Close the dangling calls other writers left on the session (004 §2.5h)."""
        r = self.r
        fixed = await self._interruptible(
            repair_session(self.deps.peers, r.tenant, r.session_id, offered_specs(r.agent))
        )
        if fixed:
            r.session_last_seq = max(r.session_last_seq, max(e.seq for e in fixed))
            self._diagnose(
                "session_repaired", f"{len(fixed)} interrupted tool call(s) of the session were closed."
            )

    async def _persist_input(self, text: str | None = None) -> None:
        """Persist the run's input (`text`: a blocking input guardrail's replacement)."""
        r = self.r
        entry = input_entry(r.run_id, r.agent.name, r.input if text is None else text)
        # A session with no entries when the run was recorded (the one StartRun created for
        # it, mostly) has an empty view at seq 0: the input's append, guarded on that seq,
        # extends it, and answers the log as of its commit (decision 0057), so the first
        # turn reads nothing (decision 0058). A foreign entry before the input fails the
        # guard; the copy is then dropped and the first turn reads the whole view.
        empty = r.session_last_seq == 0 and not self._context.loaded
        if empty:
            self._context.reset([], 0, "")
        written = await write_batch(
            self.deps.peers, r.tenant, r.session_id, [entry], r.session_last_seq, with_tail=empty
        )
        self._wrote(written.stored, written.tail)
        self._publish(items_persisted=pb.ItemsPersisted(last_seq=written.last_seq, entries=written.count))
        await self._save(
            "input_persisted", {"session_seq": written.last_seq}, session_last_seq=written.last_seq
        )

    async def _model_turn(self, turn: int, limits: Limits) -> tuple[cpb.ModelResponse, Decision]:
        r = self.r
        self._publish(turn_started=pb.TurnStarted(turn=turn))
        self.r.phase = cpb.RUN_PHASE_PLANNING  # announced on every turn, not only on a change
        self._publish(phase_changed=pb.PhaseChanged(phase=cpb.RUN_PHASE_PLANNING))
        while True:
            context = await self._interruptible(self._read_context())
            context = guardrail_checks.input_view(context, r.run_id, r.state)  # a racing Replace (004 §2.6)
            self._request_at = (self._context.last_seq, self._context.leaf)
            seq, leaf = self._request_at
            request = turnmod.build_request(
                self.agent,
                r.run_id,
                r.tenant,
                context,
                self._shape(turn),
                r.state,
                call_key=turnmod.model_call_key(r.run_id, turn, seq, leaf),
            )
            ref = request.model
            try:
                with telemetry.generation_span(provider=ref.provider, model=ref.model or "default") as gen:
                    record_request(gen, request)
                    call = self._interruptible(
                        turnmod.stream_model(
                            self.deps.peers,
                            r.tenant,
                            request,
                            lambda text: self._publish(model_delta=pb.ModelDelta(text=text)),
                            self._model_wait,
                            # a lost lease or a drain leaves the call to the next owner
                            lambda: self.stop_reason in ("", "cancel"),
                        ),
                        finish_on_shutdown=True,  # a drain logs the response: never asked twice
                    )
                    final = await self._raced(turn, call)  # turn 1 races the input guardrails (004 §2.6)
                    record_generation(gen, final)
            except ContextOverflow as exc:
                if await self._recover_overflow(turn, limits, exc, context):
                    continue  # the same turn again, on the compacted context; no turn spent
                raise RunFailed(failures.overflow_failure(exc, r.overflow_retries)) from exc
            break
        response = final.response
        if final.retries:
            wait_ms = int(final.queue_wait.ToNanoseconds() / 1e6)
            self._diagnose(
                "model_retry",
                f"The model call succeeded after {final.retries} retr{'y' if final.retries == 1 else 'ies'}.",
                retries=final.retries,
                queue_wait_ms=wait_ms,
            )
        decision = self._decide(turn, response)
        self._publish(
            model_responded=pb.ModelResponded(
                response=response,
                decision=kind_out(decision.kind),  # type: ignore[arg-type]
                reason=decision.reason,
            )
        )
        seq, leaf = self._request_at
        payload = {
            "turn": turn,
            "response": b64(response),
            "decision": str(decision.kind),
            "context_seq": seq,
            "context_leaf": leaf,
        }
        usage = turnmod.add_usage(r.usage, response.usage)
        self._last_usage, self._bytes_since = response.usage, 0
        if decision.kind == DecisionKind.TOOL_CALLS and decision.calls:
            # Written with the tool phase's first save, before any tool runs; the event
            # is held until then, so no subscriber sees a response that is not recorded.
            self._defer("model_responded", payload, usage=usage)
        else:
            # A final answer or refusal goes to the session next: the response must be on
            # record first, or a takeover could ask again and log a different one.
            await self._save("model_responded", payload, usage=usage)
            self.deps.crash("after_model_responded")
        return response, decision

    def _model_wait(self, err: MeshError, waited_s: float) -> None:
        """The gateway's stores did not answer; the call is sent again with its key (peers.py)."""
        self._diagnose(
            "model_retry",
            f"The gateway could not admit the model call ({err.message}); sending it again.",
            reason=str(err.reason),
            waited_ms=int(waited_s * 1000),
        )

    def _shape(self, turn: int) -> structured_phase.TurnShape:
        """Return what the turn offers (tools, output strategy; runs/loop/phases/structured.py)."""
        tool_free = structured_phase.tool_free_turn(self.r.state, turn)
        return structured_phase.shape_of(self.agent, tool_free=tool_free, state=self.r.state)

    async def _tool_phase(
        self,
        turn: int,
        decision: Decision,
        limits: Limits,
        *,
        announced: bool = False,
        preanswered: dict[str, cpb.ToolResult] | None = None,
        handoff_calls: frozenset[str] = frozenset(),
    ) -> BatchResult | None:
        """Run the turn's calls, or suspend the run when one waits for an answer.

        `announced` is True when the log holds this turn's tools_started: its tool_called
        events were stored in that same transaction, so a takeover re-sending the calls
        publishes only their tool_returned, and a viewer sees each call started once.

        Returns:
            The batch (every call's result, in call order), or None when the run suspended.
        """
        r = self.r
        specs = {s.name: s for s in disclosure_phase.visible(self.agent, r.state)}
        budget = limits.max_tool_calls - r.tool_calls if limits.max_tool_calls else None
        policies = command_policies(self.agent)
        planned = plan_calls(
            decision.calls, specs, set(r.always_approved), r.answers, budget, policies, preanswered
        )
        planned = await self._guard_tool_inputs(turn, planned)  # before the approval pause (004 §2.6)
        waiting = pending_calls(planned)
        if waiting:
            await self._suspend(turn, waiting, pb.SUSPENSION_REASON_PENDING_CALLS)
            return None
        self._phase(cpb.RUN_PHASE_EXECUTING_TOOLS)
        quiet = handoff_calls | self._quiet_outputs(planned)  # tool_output verdicts come first
        if not announced:
            for p in planned:
                flagged = p.call.call_id in handoff_calls  # no tool_returned follows (004 §2.4)
                self._publish(tool_called=pb.ToolCalled(call=call_out(p.call), handoff=flagged))
        await self._save(
            "tools_started", {"turn": turn, "calls": [p.call.call_id for p in planned if p.runs]}
        )
        self.deps.crash("after_model_responded")

        def on_result(res: cpb.ToolResult, held: frozenset[str] = quiet) -> None:
            if res.call_id not in held:
                self._publish(tool_returned=pb.ToolReturned(result=res))

        # After tools_started: the response is logged before this wait, which a drain may cut.
        try:
            sandbox_id = await self._sandbox() if any(p.runs for p in planned) else ""
        except (RunFailed, MeshError) as err:
            # nothing ran: the runtime's answers are shown at once (no tool_output verdict)
            return self._sandbox_lost(turn, planned, err, lambda res: on_result(res, handoff_calls))
        children = await child_phase.start(self, planned)  # agent tools: child runs (004 §2.8)
        batch = await self._watch(
            execute_calls(
                planned,
                peers=self.deps.peers,
                tenant=r.tenant,
                run_id=r.run_id,
                workspace="" if sandbox_id else r.workspace,
                sandbox_id=sandbox_id,
                regain_sandbox=self._regain_sandbox if sandbox_id else None,
                concurrency=limits.concurrency,
                on_result=on_result,
                on_queue_wait=self.deps.metrics.tool_queue_wait.observe,
                on_progress=lambda call_id, stream, text: self._publish(
                    tool_progressed=pb.ToolProgressed(call_id=call_id, stream=stream, text=text)
                ),
                stop=(stop := BatchStop()),
                attempts={p.call.call_id: r.attempt_of(p.call.call_id) for p in planned},
                children=children,
            ),
            stop,
        )
        calls = [p.call for p in planned]
        if not batch.killed:
            pending = reconcile.waiting(calls, batch.results, specs, r.answers)
            if children is not None and children.suspended:  # the parent waits too (004 §2.2 step 6)
                kept = [p for p in pending if not children.withholds(p.call.call_id)]
                await child_phase.suspend(self, turn, children, kept)
                return None
            if pending:
                await self._suspend(turn, pending, pb.SUSPENSION_REASON_RECONCILIATION)
                return None
        for i, (call, result) in enumerate(zip(calls, batch.results, strict=True)):
            if reconcile.interrupted_by_service(result) and reconcile.safe_to_rerun(specs.get(call.name)):
                batch.results[i] = reconcile.rerun_safe_result(result)
            if result.status == cpb.TOOL_RESULT_STATUS_TIMED_OUT:
                self._diagnose(
                    "tool_timeout", f"{call.name} timed out; the model was told.", call_id=call.call_id
                )
        killed = bool(batch.killed)
        batch.results = await self._guard_tool_outputs(turn, planned, batch.results, killed=killed)
        usage, nested = child_phase.fold(r.usage, r.state, batch.results)  # 004 §2.7f nested usage
        if nested:
            self._defer_state(**nested)
        self._defer(
            "tools_finished",
            {"turn": turn, "results": [b64(x) for x in batch.results]},
            tool_calls=r.tool_calls + sum(1 for p in planned if p.runs),
            usage=usage,
        )
        return batch

    async def _watch(self, work: Any, stop: BatchStop) -> BatchResult:
        """Await a tool batch while honouring a stop and the time budget (004 §2.9, §2.11b)."""
        batch = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._stopping.wait())
        left = self.r.deadline_s - time.time() if self.r.deadline_s else None
        try:
            await asyncio.wait({batch, stopping}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not batch.done():
                if not self._stopping.is_set():
                    stop.kill(OUT_OF_TIME)
                elif self.stop_reason == "cancel":
                    stop.kill(CANCELLED)
                else:
                    stop.abandon()  # shutdown or lease lost: the calls run on, journaled
            return await batch
        except Abandoned:
            raise Interrupted() from None
        finally:
            stopping.cancel()
            if not batch.done():
                batch.cancel()
