"""One run's executor: the turn loop, resumable from the run log (004 §2.1–§2.3a; 002 loop).

A `RunExecutor` drives a RUNNING run it holds the lease of. It always starts by reading
the run log, so a fresh start, a resume after approval and a takeover from a dead replica
are the same code path:
- a session the run continues is repaired first (RecoverSession, 004 §2.5h), then the
  input is persisted unless the log says it was (004 §2.5: just before the first model
  call), then compaction is consulted (004 §2.5f);
- a turn whose model response is in the log is not requested again (never billed twice);
- a turn whose tool results are in the log does not run its tools again; one whose tools
  started without a recorded end re-sends them to the tool service, which answers from
  its journal or attaches to the call still running there (idempotent on run id + call
  id + attempt); a side effect the tool service's own death interrupted suspends the run
  for a reconciliation (runs/loop/reconcile.py);
- a compaction summary in the log that was never checkpointed is checkpointed, not
  requested again.

Per turn: turn_started, planning → render + StreamGenerate (model_delta events) →
decide → log the response → tool phase (pause the whole turn when a call waits) → save
point (session batch, then run log + row + events in one transaction) → compaction →
continue / final / fail. A context overflow compacts and retries the same turn within
`max_overflow_retries` (004 §2.5g). A cancel or the time budget during the tool phase
still gives every committed call exactly one result, written before the terminal event.

The executor is layered: runs/loop/core.py (state, fenced writes, events, the end),
runs/loop/housekeeping.py (compaction, overflow recovery), runs/loop/phases/guardrails/log.py
and guardrails.py (the guardrail stages), phases/sandbox.py (the run's sandbox),
runs/loop/turns.py (the phases of a turn), and this module (the loop). Events: nothing is
delivered before the write that records it has committed, except the provisional kinds
(runs/events/channel.py), which stay inside a durable seq reservation.

Spans (mesh/telemetry, 004 §2.11e): one run span per segment the executor drives (start or
resume to suspend or end). The first segment's is opened in the context the executor was
spawned in (StartRun's server span), whose traceparent is stored with the run (its state), so
every later segment (a resume, a takeover) continues that trace, linking the span that
started it (ResumeRun's); a turn span per turn under it; the turn's
generation, tool call and compaction spans come from the phases (loop/turns.py,
loop/housekeeping.py). `agentrt_runs_running` counts the executors driving here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from agentrt.core.decide import Decision, DecisionKind
from agentrt.core.errors import MeshError
from agentrt.core.stopping import BudgetKind, on_refusal
from agentrt.core.structured import KIND_INVALID_FINAL_OUTPUT, Kind
from agentrt.mesh import telemetry
from agentrt.mesh.waits import to_the_end
from agentrt.runs.loop import failures
from agentrt.runs.loop.compaction import AFTER_RUN, BEFORE_RUN, SAVE_POINT
from agentrt.runs.loop.core import Interrupted, LeaseLost
from agentrt.runs.loop.failures import RunFailed
from agentrt.runs.loop.persistence import runtime_user_entry
from agentrt.runs.loop.phases import handoff as handoff_phase
from agentrt.runs.loop.phases import model as turnmod
from agentrt.runs.loop.phases import stopping as stopping_phase
from agentrt.runs.loop.phases import structured as structured_phase
from agentrt.runs.loop.phases.results import BatchResult
from agentrt.runs.loop.phases.savepoint import AT_FINAL, AT_SAVE_POINT
from agentrt.runs.loop.phases.structured import Verdict
from agentrt.runs.loop.turns import CANCELLED, TurnSteps
from agentrt.runs.peers.sessions import RUN_SESSION, SESSION_GENERATION
from agentrt.runs.peers.streams import RUN_CALLS, RunCalls
from agentrt.runs.spec.agents import limits_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

log = logging.getLogger("agentrt.runs")

__all__ = ["LeaseLost", "RunExecutor"]


def _of_turn(entries: list[tuple[int, str, dict[str, Any]]], turn: int) -> dict[str, dict[str, Any]]:
    return {k: p for _, k, p in entries if p.get("turn") == turn}


class RunExecutor(TurnSteps):
    """Drives one run (see the module docstring)."""

    async def run(self) -> None:
        """Drive the run until it ends, suspends, or is stopped; never raises.

        While it drives, the run's turn calls go over its streams of calls to its peers
        (runs/peers/streams.py), closed when it stops driving.
        """
        peers = self.deps.peers
        calls = RunCalls(peers.client, self.r.tenant, peers.local) if self.deps.peer_streams else None
        token = RUN_CALLS.set(calls)
        # Its session by the generation it started on (decision 0058; 004 §2.5e2).
        held = RUN_SESSION.set((self.r.session_id, int(self.r.state.get(SESSION_GENERATION, 0) or 0)))
        self.deps.store.input_watch.track(self.r.run_id)  # pushes to it are heard of (decision 0060)
        try:
            await self._run()
        finally:
            self.deps.store.input_watch.untrack(self.r.run_id)
            RUN_SESSION.reset(held)
            RUN_CALLS.reset(token)
            if calls is not None:
                calls.close()

    async def _run(self) -> None:
        r, metrics = self.r, self.deps.metrics
        metrics.runs_running.inc()
        self._turn_spans = contextlib.ExitStack()
        # Every segment continues the trace the first one was started in (stored with the run).
        parent = str(r.state.get("traceparent", ""))
        if not parent and (origin := telemetry.traceparent()):
            self._defer_state(traceparent=origin)
        try:
            with telemetry.run_span(
                r.run_id,
                agent=r.agent.name,
                agent_version=r.agent_version,
                session_id=r.session_id,
                tenant=r.tenant,
                parent=parent,
            ) as span:
                await self._segment()
                self._turn_spans.close()
                status = self.ended or r.status
                name = cpb.RunStatus.Name(status).lower()[11:]  # type: ignore[arg-type]
                span.set("agentrt.run.status", name)
                log.info("run %s: %s after %d turn(s)", r.run_id, name, r.turns)
                if self.ended == cpb.RUN_STATUS_FAILED and r.failure is not None:
                    span.fail(r.failure.kind or "failed", r.failure.message)
        finally:
            self._turn_spans.close()
            metrics.runs_running.dec()
            if self.ended:
                metrics.runs_finished.labels(cpb.RunStatus.Name(self.ended).lower()[11:]).inc()  # type: ignore[arg-type]

    def _turn_begun(self, turn: int) -> None:
        """Close the previous turn's span and open turn `turn`'s (the loop calls it per turn)."""
        self._turn_spans.close()
        self._turn_spans.enter_context(telemetry.turn_span(turn, run_id=self.r.run_id))
        self.deps.metrics.turns.inc()

    async def _segment(self) -> None:
        """`run`'s body: drive until the run ends, suspends or is stopped; never raises."""
        try:
            await self._drive()
        except asyncio.CancelledError:
            if self.stop_reason == "shutdown":
                # The drain's deadline came while the run still waited (a model call that
                # outlasts the drain; the gateway finishes and journals it): the lease goes
                # to the next owner now, not when it expires (runs/lifecycle/drain.py).
                await self._hand_over_quietly()
            raise
        except Interrupted:
            # Run to their end: the drain's deadline cancel would cut them with the lease held.
            if self.stop_reason == "cancel":
                await to_the_end(self._end_quietly(cpb.RUN_STATUS_CANCELED))
            elif self.stop_reason == "shutdown":
                await to_the_end(self._hand_over())
        except LeaseLost:
            log.info("run %s: lease lost, another replica owns it", self.r.run_id)
        except RunFailed as stop:
            await self._end_quietly(cpb.RUN_STATUS_FAILED, failure=stop.failure)
        except MeshError as err:
            await self._end_quietly(cpb.RUN_STATUS_FAILED, failure=failures.failure_of(err))
        except Exception as exc:  # noqa: BLE001 - a run fails; the process keeps serving
            log.exception("run %s failed", self.r.run_id)
            await self._end_quietly(
                cpb.RUN_STATUS_FAILED,
                failure=failures.failure(
                    "internal", "The run failed because of an internal error.", debug=repr(exc)
                ),
            )
        finally:
            self.deps.hub.close(self.channel)

    # -- persistence helpers ---------------------------------------------------------------

    async def _drive(self) -> None:
        r = self.r
        entries = await self.deps.store.read_log(r.run_id)
        kinds = {k for _, k, _ in entries}
        next_turn = r.turns + 1
        recorded = _of_turn(entries, next_turn)
        if "input_persisted" not in kinds:
            text = await self._guard_blocking_input()  # before the session is touched (004 §2.6)
            if r.session_last_seq > 0:
                await self._repair()
            await self._persist_input(text)
            await self._compact(BEFORE_RUN, 0)
        else:
            await self._finish_pending_checkpoint(entries)
        limits = limits_of(r.agent)
        turn = r.turns
        while True:
            turn += 1
            self.turn = turn
            self._turn_begun(turn)
            if stopping_phase.STOPPED_OUTPUT in r.state:  # stopped at the last save point
                await self._finish_stopped()
                return
            if self._stopping.is_set():
                raise Interrupted()
            mine = recorded if turn == next_turn else {}
            response = self._recorded_response(mine)
            if response is None:
                budget = stopping_phase.budget(turn, limits.max_turns, r.agent, r.state)
                if budget.kind == BudgetKind.FALLBACK:
                    await self._finish(cpb.RUN_STATUS_COMPLETED, final_output=budget.output)
                    return
                closing = budget.kind == BudgetKind.CLOSING_CALL
                if closing and r.state.get(stopping_phase.CLOSING_TURN) != turn:
                    # The one tool-free closing call (004 §2.7d), recorded with the response.
                    self._defer_state(
                        **{stopping_phase.CLOSING_TURN: turn, structured_phase.TOOL_FREE_TURN: turn}
                    )
                max_turns = turn if closing else limits.max_turns
                turnmod.check_budget(turn, max_turns, limits.time_budget_s, r.create_time_s)
                response, decision = await self._model_turn(turn, limits)
            else:
                decision = self._decide(turn, response)
                made = mine["model_responded"]
                self._request_at = (
                    int(made.get("context_seq", r.session_last_seq)),
                    made.get("context_leaf"),
                )
            if decision.kind == DecisionKind.REFUSAL:
                await self._save_turn(turn, response, decision, [], ())
                handled = on_refusal(stopping_phase.handlers_of(r.agent).refusal)
                if handled.kind == BudgetKind.FALLBACK:
                    await self._finish(cpb.RUN_STATUS_COMPLETED, final_output=handled.output)
                    return
                raise RunFailed(
                    failures.failure("refusal", "The model refused to answer.", debug=decision.reason)
                )
            shape = self._shape(turn)
            verdict = structured_phase.judge_turn(
                self.agent,
                shape,
                decision,
                recovery_used=bool(r.state.get(structured_phase.RECOVERY_USED)),
                fallback=stopping_phase.handlers_of(r.agent).invalid_final_output.fallback_output,
            )
            if verdict is not None and verdict.kind == Kind.FINAL:
                self._phase(cpb.RUN_PHASE_SYNTHESIZING)
                output, response, decision = await self._guard_final(verdict.output, response, decision)
                if await self._save_turn(turn, response, decision, verdict.results, AT_FINAL):
                    continue  # queued input outranks the finish (004 §2.10)
                await self._compact(AFTER_RUN, turn)
                await self._finish(cpb.RUN_STATUS_COMPLETED, final_output=output)
                return
            if verdict is not None:
                await self._rejected_output(turn, response, decision, verdict)
                await self._compact(SAVE_POINT, turn)
                continue
            results: list[cpb.ToolResult] = []
            batch: BatchResult | None = None
            handoff, target = await self._plan_handoff(decision)
            if decision.calls:
                finished = mine.get("tools_finished")
                if finished is not None:
                    results = [cpb.ToolResult.FromString(base64.b64decode(x)) for x in finished["results"]]
                else:
                    batch = await self._tool_phase(
                        turn,
                        decision,
                        limits,
                        announced="tools_started" in mine,
                        preanswered={
                            **structured_phase.preanswered(shape, decision),
                            **(handoff.answered if handoff else {}),
                        },
                        handoff_calls=frozenset(handoff.answered if handoff else ()),
                    )
                    if batch is None:
                        return  # suspended; ResumeRun continues the turn
                    results = batch.results
            switch = self._switch(handoff, target) if handoff is not None and target is not None else None
            stop_with = None
            if results and not (batch is not None and (batch.killed or batch.failure is not None)):
                stop_with = stopping_phase.terminate_output(
                    results, stopping_phase.terminating_tools(self.agent)
                )
            consume = AT_FINAL if stop_with is not None else AT_SAVE_POINT
            extended = await self._save_turn(
                turn, response, decision, results, consume, on_written=switch, stoppable=stop_with is None
            )
            if stop_with is not None and not extended:
                # Every call of the batch asked to stop (004 §2.7b): its last output is final.
                await self._compact(AFTER_RUN, turn)
                await self._finish(cpb.RUN_STATUS_COMPLETED, final_output=stop_with)
                return
            if batch is not None and batch.killed == CANCELLED:
                await self._finish(cpb.RUN_STATUS_CANCELED)
                return
            if batch is not None and batch.killed:
                raise RunFailed(failures.failure("timeout", "The run used its time budget.", retryable=True))
            if batch is not None and batch.failure is not None:
                raise batch.failure
            if stopping_phase.STOPPED_OUTPUT in r.state:
                await self._finish_stopped()
                return
            if limits.max_error_turns >= 0 and r.consecutive_error_turns >= limits.max_error_turns:
                raise RunFailed(
                    failures.failure(
                        "tool_loop",
                        f"Every tool call failed in {r.consecutive_error_turns} consecutive turns.",
                    )
                )
            await self._compact(SAVE_POINT, turn)

    async def _finish_stopped(self) -> None:
        """Finish a run StopAfterTurn stopped at its last save point (004 §2.3c)."""
        self.turn = self.r.turns
        await self._compact(AFTER_RUN, self.r.turns)
        await self._finish(
            cpb.RUN_STATUS_COMPLETED, final_output=str(self.r.state[stopping_phase.STOPPED_OUTPUT])
        )

    async def _plan_handoff(
        self, decision: Decision
    ) -> tuple[handoff_phase.HandoffPlan | None, pb.AgentSpec | None]:
        """Return the response's handoff and its target's fresh snapshot (004 §2.4), or Nones.

        Raises:
            RunFailed: the handoff's input was refused (`invalid_handoff_input`) or its
                target cannot run (`handoff_failed`); nothing of the turn has run.
        """
        try:
            handoff = handoff_phase.plan(self.agent, decision)
            if handoff is None:
                return None, None
            with telemetry.handoff_span(
                self.agent.name, handoff.target.agent_name, call_id=handoff.call.call_id
            ) as span:
                try:
                    target = await self._interruptible(
                        handoff_phase.resolve_target(
                            self.deps.store.get_agent, self.deps.peers.catalog, self.r.tenant,
                            handoff.target, self.r.agent.model,
                        )
                    )  # fmt: skip
                except handoff_phase.HandoffFailed as failed:
                    span.fail(failed.failure.kind or "handoff_failed", failed.failure.message)
                    raise
                span.set("agentrt.handoff.to_agent_version", target.version)
        except handoff_phase.HandoffFailed as failed:
            raise RunFailed(failed.failure) from None
        return handoff, target

    def _switch(self, handoff: handoff_phase.HandoffPlan, target: pb.AgentSpec) -> Callable[[int], None]:
        """Return the save-point hook that hands the run to `target` (state + handoff_requested)."""
        source = self.agent.name

        def switch(session_seq: int) -> None:
            ignored = [c for c in handoff.answered if c != handoff.call.call_id]
            self._publish(
                handoff_requested=pb.HandoffRequested(
                    call_id=handoff.call.call_id,
                    from_agent=source,
                    to_agent=target.name,
                    to_agent_version=target.version,
                    arguments=handoff.call.arguments or handoff.call.invalid_arguments,
                    ignored_call_ids=ignored,
                )
            )
            self._defer_state(
                **handoff_phase.switched_state(target, handoff.call, handoff.target.input_filter, session_seq)
            )

        return switch

    async def _rejected_output(
        self, turn: int, response: cpb.ModelResponse, decision: Decision, verdict: Verdict
    ) -> None:
        """Save a turn whose final output did not match the schema (004 §2.3; decision 0006).

        RECOVER: the next turn is tool-free and reads the problem (as the output call's
        result, or as a runtime user message after a text answer); FAIL: the run fails
        with kind `invalid_final_output`, details_json {"pointer", "error"}.

        Raises:
            RunFailed: FAIL.
        """
        r = self.r
        if verdict.kind == Kind.FAIL:
            await self._save_turn(turn, response, decision, verdict.results, ())
            failed = failures.failure(
                KIND_INVALID_FINAL_OUTPUT,
                "The final answer did not match the output schema, also after one recovery turn.",
                debug=verdict.failure_details.get("error", ""),
            )
            failed.details_json = json.dumps(verdict.failure_details)
            raise RunFailed(failed)
        extra = []
        if not verdict.results:
            extra = [runtime_user_entry(r.run_id, turn, r.agent.name, verdict.recovery_text, "recovery")]
        self._defer_state(**{structured_phase.RECOVERY_USED: True, structured_phase.TOOL_FREE_TURN: turn + 1})
        self._diagnose(
            "final_output_rejected", "The final answer did not match the output schema; one recovery turn."
        )
        await self._save_turn(turn, response, decision, verdict.results, AT_SAVE_POINT, extra)
