"""Guardrails in the run loop: the four stages at their points of a turn (004 §2.6, §2.5, §2.7f).

`GuardrailSteps` is the executor's layer for guardrails (between housekeeping and the turn
phases, runs/loop/executor.py). Where each stage runs (`guardrail_checks` selects and
consults):

- input, blocking (`_guard_blocking_input`): before the session is touched (before a
  repair, before the input is persisted), all at once, fail fast. A tripwire leaves the
  session untouched and costs no model call; a Replace is what is persisted as the input,
  so the guarded call itself reads it.
- input, racing (`_raced`, the default): around turn 1's model call, driven by
  `core.input_race.InputRace`. A tripwire while the call is in flight cancels it (the
  gateway's stream is cancelled, so the provider's connection drops; no response, no
  usage); a tripwire after the response came back discards it (its usage counts: it was
  billed); the model failing on its own cancels the guardrails still pending. A Replace
  misses the call it raced and applies from the next turn on: the run's state keeps it
  (`INPUT_REPLACED`) and `input_view` puts it in place of the input in what later turns
  render; the session keeps what the user sent.
- output (`_guard_final`, and `_finish` for every other way a run completes: a fallback
  handler, terminating tools, StopAfterTurn): all at once, fail fast, on the final output
  before it is persisted. A tripwire fails the run: the session gets no final answer and
  the Run no output; a Replace is the run's output and the text of the turn's answer in
  the session (`replaced_response`).
- tool_input (`_guard_tool_inputs`): per call that would execute (runs, or waits for an
  approval or a client's result), in order (the agent's, then the tool's), stopping at the
  first Replace or Trip, before the approval pause: a Replace answers the call (it does not
  run and needs no approval), a tripwire fails the run before anything runs.
- tool_output (`_guard_tool_outputs`): per result of a call that ran, or a client's result,
  in order, before the result is persisted or shown: a Replace rewrites the content (and
  summary; the host-only details give way to {"replaced_by_guardrail"}) the model and the
  session get; those calls' `tool_returned` events wait for the
  verdict (`_quiet_outputs`), so the stream never shows what a guardrail replaced.

Every stage's decision is consulted once and kept in the run log before it is acted on
(runs/loop/phases/guardrails/log.py, `GuardrailLog`: `_stage`, `_consult_stage`, `_record`,
`_decided`), so a resume or a takeover reads it instead of asking again. A result that ends
the run (a tripwire, or an error: fail closed) fails it with `failures.guardrail_failure`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import Any

from agentrt.core.decide import REASON_BYTES, Decision
from agentrt.core.guardrails import SCOPE_AGENT, Stage
from agentrt.core.input_race import Ending, InputRace
from agentrt.core.truncate import truncate
from agentrt.runs.loop.failures import RunFailed, guardrail_failure
from agentrt.runs.loop.phases import model as turnmod
from agentrt.runs.loop.phases.guardrails.checks import (
    INPUT_REPLACED,
    Consulted,
    consult,
    ending,
    input_checks,
    replaced_calls,
    replaced_response,
    replacement,
    stage_checks,
    tool_checks,
    tool_subjects,
)
from agentrt.runs.loop.phases.guardrails.log import GuardrailLog, key_of
from agentrt.runs.loop.phases.tools import Planned, runtime_result
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import run_service_pb2 as pb


class GuardrailSteps(GuardrailLog):
    """The guardrail stages of a run (see the module docstring)."""

    # -- input ----------------------------------------------------------------------------

    async def _guard_blocking_input(self) -> str:
        """Run the blocking input guardrails; return the input to persist (a Replace's, or the run's).

        Raises:
            RunFailed: a tripwire or an error (nothing was written to the session).
        """
        checks = input_checks(self.r.agent, blocking=True)
        if not checks:
            return self.r.input
        results = await self._stage(
            key_of(Stage.INPUT, 1, mode="blocking"), Stage.INPUT, self.r.input, checks
        )
        rep = replacement(results)
        return rep.message if rep is not None else self.r.input

    async def _raced(
        self, turn: int, call: Coroutine[Any, Any, gpb.GenerateResponse]
    ) -> gpb.GenerateResponse:
        """Await turn 1's model call racing the input guardrails (module docstring); other turns: await it.

        Raises:
            RunFailed: a racing guardrail tripped or erred (the call was cancelled, or its
                response discarded).
            the model call's own errors (the pending guardrails cancelled first).
        """
        checks = input_checks(self.r.agent, blocking=False) if turn == 1 else []
        if not checks:
            return await call
        key = key_of(Stage.INPUT, 1, mode="racing")
        known = await self._decided(key)
        if known is not None:
            if (end := ending([c.result for c in known])) is not None:
                call.close()
                raise RunFailed(guardrail_failure(end))
            return await call
        r, model = self.r, self.r.agent.model
        blocked = await self._decided(key_of(Stage.INPUT, 1, mode="blocking"))
        rep = replacement([c.result for c in blocked or ()])
        text = rep.message if rep is not None else r.input  # what was persisted as the input
        race = InputRace([g.name for g in checks])
        response = asyncio.ensure_future(call)
        judges = {
            asyncio.ensure_future(
                consult(
                    self.deps.peers,
                    r.tenant,
                    r.run_id,
                    model,
                    g,
                    Stage.INPUT,
                    text,
                    call_key=turnmod.judge_call_key(r.run_id, key, SCOPE_AGENT, i, g.name),
                    stops_call=self._stops_judge,
                )  # fmt: skip
            ): g
            for i, g in enumerate(checks)
        }
        got: dict[str, Consulted] = {}
        try:
            pending: set[asyncio.Future[Any]] = {response, *judges}
            while not race.terminal:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                answered = response in done
                failed = answered and (response.cancelled() or response.exception() is not None)
                if answered and not failed:  # a response that exists was billed: taken first
                    race.model_done()
                for task in judges:
                    if task in done and not race.terminal:
                        answer = task.result()
                        got[answer.result.guardrail] = answer
                        race.guardrail_done(answer.result)
                if failed and not race.terminal:  # a verdict delivered with the failure still wins
                    race.model_failed()
        finally:
            left = [t for t in judges if not t.done()]
            if race.outcome is not None and race.outcome.ending == Ending.TRIPPED and not response.done():
                left.append(response)  # the tripwire cancels the call in flight: no response, no usage
            elif not race.terminal:  # interrupted (a stop, a lease lost): nothing decided
                left.append(response)
            for task in left:
                task.cancel()
            if left:
                await asyncio.gather(*left, return_exceptions=True)
        outcome = race.outcome
        assert outcome is not None
        consulted = [got[n.guardrail] for n in race.results] + [Consulted(c) for c in outcome.cancelled]
        order = {g.name: i for i, g in enumerate(checks)}
        consulted.sort(key=lambda c: order[c.result.guardrail])
        if outcome.ending == Ending.MODEL_FAILED:
            self._announce(consulted)  # durable with the failure's (or the retry's) save
            return response.result()  # raises the model's error
        if outcome.ending == Ending.TRIPPED:
            if outcome.model_billed:  # made and discarded: its tokens were spent all the same
                self._deferred_changes["usage"] = r.usage = turnmod.add_usage(
                    r.usage, response.result().response.usage
                )
            await self._record([(key, consulted)])
            assert outcome.ended_by is not None
            raise RunFailed(guardrail_failure(outcome.ended_by))
        if outcome.replacement is not None:  # misses the raced call; applies from the next turn
            self._defer_state(**{INPUT_REPLACED: {"text": outcome.replacement.message}})
        await self._record([(key, consulted)])
        return response.result()

    # -- output ---------------------------------------------------------------------------

    async def _guard_output(self, text: str) -> str:
        """Run the current agent's output guardrails on a final output; return the output to keep.

        Raises:
            RunFailed: a tripwire or an error.
        """
        checks = stage_checks(self._snap, Stage.OUTPUT)
        if not checks:
            return text
        results = await self._stage(key_of(Stage.OUTPUT, self.turn), Stage.OUTPUT, text, checks)
        rep = replacement(results)
        return rep.message if rep is not None else text

    async def _guard_final(
        self, output: str, response: cpb.ModelResponse, decision: Decision
    ) -> tuple[str, cpb.ModelResponse, Decision]:
        """Guard a model's final answer before its turn is persisted (004 §2.6 output stage).

        Returns:
            (the output, the response and decision to persist): a Replace's text in place of
            the answer everywhere the session keeps it (the message, the step's reason).

        Raises:
            RunFailed: a tripwire or an error: the answer is never persisted.
        """
        guarded = await self._guard_output(output)
        if guarded == output:
            return output, response, decision
        reason = truncate(guarded, REASON_BYTES) if decision.reason else ""
        return (
            guarded,
            replaced_response(response, guarded),
            replace(
                decision, reason=reason, final_output=guarded, calls=replaced_calls(decision.calls, guarded)
            ),
        )

    async def _finish(
        self, status: int, *, final_output: str = "", failure: cpb.FailureInfo | None = None
    ) -> None:
        """End the run; a completed run's output passes the output stage first (once per turn: the log).

        Raises:
            RunFailed: the output stage tripped (the run is then failed by the caller).
        """
        if status == cpb.RUN_STATUS_COMPLETED:
            final_output = await self._guard_output(final_output)
        await super()._finish(status, final_output=final_output, failure=failure)

    # -- tools ----------------------------------------------------------------------------

    async def _guard_tool_inputs(self, turn: int, planned: list[Planned]) -> list[Planned]:
        """Run the tool_input stage on each call that would execute; return the plan (module docstring).

        Calls are checked concurrently, each call's guardrails in order; the decisions are
        recorded in one save.

        Raises:
            RunFailed: a tripwire or an error on any call (nothing of the batch has run).
        """
        snap = self._snap
        subjects = tool_subjects(planned, snap, Stage.TOOL_INPUT)
        if not subjects:
            return planned
        keys = [key_of(Stage.TOOL_INPUT, turn, planned[i].call.call_id) for i in subjects]
        asked = await asyncio.gather(
            *(
                self._consult_stage(
                    key,
                    Stage.TOOL_INPUT,
                    planned[i].call.arguments,
                    tool_checks(snap, planned[i].call.name, Stage.TOOL_INPUT),
                    call_id=planned[i].call.call_id,
                )
                for key, i in zip(keys, subjects, strict=True)
            )
        )
        # Nothing acts on these before the next save (tools_started, suspended or completed).
        await self._record(
            [(key, c) for key, (c, fresh) in zip(keys, asked, strict=True) if fresh], save=False
        )
        out = list(planned)
        for i, (consulted, _) in zip(subjects, asked, strict=True):
            results = [c.result for c in consulted]
            if (end := ending(results)) is not None:
                raise RunFailed(guardrail_failure(end))
            rep = replacement(results)
            if rep is not None:  # the tool does not run; the replacement is its result
                result = runtime_result(out[i].call, rep.message, cpb.TOOL_RESULT_STATUS_OK, is_error=False)
                out[i] = replace(out[i], result=result, pending=pb.PENDING_CALL_KIND_UNSPECIFIED)
        return out

    def _quiet_outputs(self, planned: Sequence[Planned]) -> frozenset[str]:
        """Call ids whose `tool_returned` waits for the tool_output verdict."""
        return frozenset(
            planned[i].call.call_id for i in tool_subjects(planned, self._snap, Stage.TOOL_OUTPUT)
        )

    async def _guard_tool_outputs(
        self, turn: int, planned: Sequence[Planned], results: list[cpb.ToolResult], *, killed: bool = False
    ) -> list[cpb.ToolResult]:
        """Run the tool_output stage on the batch's results; return them as the model will see them.

        `killed`: the batch was cancelled or ran out of time; the stage still runs (the
        results are persisted), without yielding to the stop. The held `tool_returned`
        events are published here, with the guarded results.

        Raises:
            RunFailed: a tripwire or an error (the turn is not persisted).
        """
        subjects = tool_subjects(planned, self._snap, Stage.TOOL_OUTPUT)
        if not subjects:
            return results
        snap = self._snap
        keys = [key_of(Stage.TOOL_OUTPUT, turn, planned[i].call.call_id) for i in subjects]
        asked = await asyncio.gather(
            *(
                self._consult_stage(
                    key,
                    Stage.TOOL_OUTPUT,
                    results[i].content,
                    tool_checks(snap, planned[i].call.name, Stage.TOOL_OUTPUT),
                    call_id=planned[i].call.call_id,
                    interruptible=not killed,
                )
                for key, i in zip(keys, subjects, strict=True)
            )
        )
        await self._record([(key, c) for key, (c, fresh) in zip(keys, asked, strict=True) if fresh])
        out = list(results)
        for i, (consulted, _) in zip(subjects, asked, strict=True):
            found = [c.result for c in consulted]
            if (end := ending(found)) is not None:
                raise RunFailed(guardrail_failure(end))
            rep = replacement(found)
            if rep is not None:
                changed = cpb.ToolResult()
                changed.CopyFrom(out[i])
                # The host-only details may echo what was replaced: they go too.
                changed.content, changed.summary = rep.message, rep.message.split("\n")[0][:120]
                changed.details_json = json.dumps({"replaced_by_guardrail": rep.guardrail})
                out[i] = changed
            self._publish(tool_returned=pb.ToolReturned(result=out[i]))
        return out
