"""One run's executor: the turn loop, resumable from the run log (004 §2.1–§2.3a; 002 loop).

A `RunExecutor` drives a RUNNING run it holds the lease of. It always starts by reading
the run log, so a fresh start, a resume after approval and a takeover from a dead replica
are the same code path:
- the input is persisted unless the log says it was (004 §2.5: just before the first
  model call);
- a turn whose model response is in the log is not requested again;
- a turn whose tool results are in the log does not run its tools again; one whose tools
  started without a recorded end re-sends them to the tool service, which answers from
  its journal (idempotent on run_id + call_id).

Per turn: turn_started, planning → render + StreamGenerate (model_delta events) → decide
→ log the response → tool phase (pause the whole turn when a call waits) → save point
(session batch, then run log + row + events in one transaction) → continue / final /
fail. Every write is fenced by the lease's token; a write that finds the token stale means
another replica owns the run, and this executor stops without acting.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from agentrt.core.decide import Decision, DecisionKind, decide, mint_call_id
from agentrt.core.errors import MeshError
from agentrt.runs import turn as turnmod
from agentrt.runs.agents import command_policies, limits_of, offered_specs
from agentrt.runs.context_cache import ContextCache
from agentrt.runs.convert import call_out, kind_out, response_in
from agentrt.runs.events import EventHub
from agentrt.runs.peers import Peers
from agentrt.runs.persistence import injected_entry, input_entry, turn_entries, write_batch
from agentrt.runs.store import RunRecord, RunStore, StoredEvent
from agentrt.runs.tools_phase import execute_calls, pending_calls, plan_calls
from agentrt.runs.turn import RunFailed
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

log = logging.getLogger("agentrt.runs")

_TERMINAL_PHASE = {
    cpb.RUN_STATUS_COMPLETED: cpb.RUN_PHASE_COMPLETED,
    cpb.RUN_STATUS_FAILED: cpb.RUN_PHASE_FAILED,
    cpb.RUN_STATUS_CANCELED: cpb.RUN_PHASE_CANCELED,
}
#: Injection kinds consumed at a save point that continues, and at a final output (004 §2.11b).
AT_SAVE_POINT = ("steer", "next_turn")
AT_FINAL = ("steer", "follow_up")


class LeaseLost(Exception):
    """A fenced write found another owner's token: stop without acting."""


class _Interrupted(Exception):
    """A stop was requested (cancel, shutdown, lease lost) while the run waited on a peer."""


@dataclass
class Deps:
    """What every executor shares: storage, peers, the event hub and run-level settings."""

    store: RunStore
    peers: Peers
    hub: EventHub
    owner: str
    lease_seconds: float


def _b64(msg: Any) -> str:
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


class RunExecutor:
    """Drives one run (see the module docstring)."""

    def __init__(self, deps: Deps, record: RunRecord, token: int, seq: int, session_seq: int) -> None:
        """Open the run's event channel, numbering after (seq, session_seq)."""
        self.deps = deps
        self.r = record
        self.token = token
        self.channel = deps.hub.open(record.run_id, record.tenant, record.session_id, seq, session_seq)
        self.stop_reason = ""
        self.cancel_message = ""
        self.turn = record.turns
        self._stopping = asyncio.Event()
        #: Log entries (and their run-row changes) recorded but not written yet: they ride
        #: on the next save, which always comes before anything acts on them (see _defer).
        self._deferred_log: list[tuple[str, dict[str, Any]]] = []
        self._deferred_changes: dict[str, Any] = {}
        #: The session's context view as this executor last read or wrote it.
        self._context = ContextCache()

    def stop(self, reason: str, message: str = "") -> None:
        """Ask the run to stop at its next wait: "cancel", "shutdown" or "lease_lost".

        Only waits on peers (the model call, tool execution) are interrupted; a database
        write in progress always completes, so the log and the events stay consistent.
        """
        if not self.stop_reason:
            self.stop_reason, self.cancel_message = reason, message
        self._stopping.set()

    async def _interruptible(self, awaitable: Any) -> Any:
        if self._stopping.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise _Interrupted()
        task = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(self._stopping.wait())
        try:
            done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
        if task in done:
            return task.result()
        with contextlib.suppress(BaseException):
            await task
        raise _Interrupted()

    async def run(self) -> None:
        """Drive the run until it ends, suspends, or is stopped; never raises."""
        try:
            await self._drive()
        except _Interrupted:
            if self.stop_reason == "cancel":
                await self._end_quietly(cpb.RUN_STATUS_CANCELED)
            elif self.stop_reason == "shutdown":
                await self.deps.store.release_lease(self.r.run_id, self.token)
        except LeaseLost:
            log.info("run %s: lease lost, another replica owns it", self.r.run_id)
        except RunFailed as stop:
            await self._end_quietly(cpb.RUN_STATUS_FAILED, failure=stop.failure)
        except MeshError as err:
            await self._end_quietly(cpb.RUN_STATUS_FAILED, failure=turnmod.failure_of(err))
        except Exception as exc:  # noqa: BLE001 - a run fails; the process keeps serving
            log.exception("run %s failed", self.r.run_id)
            await self._end_quietly(
                cpb.RUN_STATUS_FAILED,
                failure=turnmod.failure(
                    "internal", "The run failed because of an internal error.", debug=repr(exc)
                ),
            )
        finally:
            self.deps.hub.close(self.channel)

    # -- persistence helpers ---------------------------------------------------------------

    def _publish(self, **payload: Any) -> None:
        self.channel.publish(self.turn, **payload)

    def _phase(self, phase: int) -> None:
        if self.r.phase != phase:
            self.r.phase = phase
            self._publish(phase_changed=pb.PhaseChanged(phase=phase))  # type: ignore[arg-type]

    def _defer(self, kind: str, payload: dict[str, Any], **changes: Any) -> None:
        """Record a transition to be written by the next `_save`, in the same transaction.

        Only for a transition nothing outside this process acts on before the next save
        point: the model's response of a turn that goes on to its tool phase (written with
        tools_started/suspended, before any tool runs), and a tool phase's results (written
        with the turn's save point; a takeover in between re-sends the calls and the tool
        service answers from its journal). The changes apply to the in-memory record now.
        """
        self._deferred_log.append((kind, payload))
        self._deferred_changes.update(changes)
        for name, value in changes.items():
            setattr(self.r, name, value)

    async def _save(
        self, kind: str, payload: dict[str, Any], *, staged: list[StoredEvent] | None = None, **changes: Any
    ) -> None:
        """Write a transition: run row changes, log entries, the events so far; one transaction.

        Deferred transitions (see `_defer`) are written first, in order. `staged` events are
        written too and delivered only after the commit.
        """
        drop = changes.pop("_drop_inputs", ())
        events = self.channel.take() + list(staged or ())
        changes = {**self._deferred_changes, **changes}
        changes.setdefault("phase", self.r.phase)
        done = await self.deps.store.save(
            self.r.run_id,
            changes=changes,
            log=[*self._deferred_log, (kind, payload)],
            events=events,
            token=self.token,
            drop_inputs=drop,
        )
        if done is None:
            raise LeaseLost()
        self._deferred_log, self._deferred_changes = [], {}
        self.channel.flushed(events)
        if staged:
            self.deps.hub.deliver(list(staged))
        for name, value in changes.items():
            setattr(self.r, name, value)

    # -- the loop --------------------------------------------------------------------------

    async def _drive(self) -> None:
        r = self.r
        entries = await self.deps.store.read_log(r.run_id)
        kinds = {k for _, k, _ in entries}
        next_turn = r.turns + 1
        recorded: dict[str, dict[str, Any]] = {k: p for _, k, p in entries if p.get("turn") == next_turn}
        if "input_persisted" not in kinds:
            await self._persist_input()
        limits = limits_of(r.agent)
        turn = r.turns
        while True:
            turn += 1
            self.turn = turn
            if self._stopping.is_set():
                raise _Interrupted()
            response = self._recorded_response(recorded) if turn == next_turn else None
            if response is None:
                turnmod.check_budget(turn, limits.max_turns, limits.time_budget_s, r.create_time_s)
                response, decision = await self._model_turn(turn)
            else:
                decision = self._decide(turn, response)
            if decision.kind == DecisionKind.REFUSAL:
                await self._save_turn(turn, response, decision, [], ())
                raise RunFailed(
                    turnmod.failure("refusal", "The model refused to answer.", debug=decision.reason)
                )
            if decision.kind == DecisionKind.FINAL:
                turnmod.check_final_output(r.agent.output_json_schema, decision.final_output)
                self._phase(cpb.RUN_PHASE_SYNTHESIZING)
                if await self._save_turn(turn, response, decision, [], AT_FINAL):
                    continue  # queued input outranks the finish (004 §2.10)
                await self._finish(cpb.RUN_STATUS_COMPLETED, final_output=decision.final_output)
                return
            results: list[cpb.ToolResult] = []
            if decision.calls:
                finished = recorded.get("tools_finished") if turn == next_turn else None
                if finished is not None:
                    results = [cpb.ToolResult.FromString(base64.b64decode(x)) for x in finished["results"]]
                else:
                    announced = turn == next_turn and "tools_started" in recorded
                    maybe = await self._tool_phase(
                        turn, decision, limits.concurrency, limits.max_tool_calls, announced=announced
                    )
                    if maybe is None:
                        return  # suspended; ResumeRun continues the turn
                    results = maybe
            await self._save_turn(turn, response, decision, results, AT_SAVE_POINT)
            if limits.max_error_turns >= 0 and r.consecutive_error_turns >= limits.max_error_turns:
                raise RunFailed(
                    turnmod.failure(
                        "tool_loop",
                        f"Every tool call failed in {r.consecutive_error_turns} consecutive turns.",
                    )
                )

    def _recorded_response(self, recorded: dict[str, dict[str, Any]]) -> cpb.ModelResponse | None:
        payload = recorded.get("model_responded")
        if payload is None:
            return None
        return cpb.ModelResponse.FromString(base64.b64decode(payload["response"]))

    def _decide(self, turn: int, response: cpb.ModelResponse) -> Decision:
        single = self.r.agent.tool_call_mode == pb.TOOL_CALL_MODE_SINGLE
        return decide(
            response_in(response), single_call=single, call_id=lambda i: mint_call_id(self.r.run_id, turn, i)
        )

    async def _persist_input(self) -> None:
        r = self.r
        entry = input_entry(r.run_id, r.agent.name, r.input)
        last_seq, count, stored = await write_batch(
            self.deps.peers, r.tenant, r.session_id, [entry], r.session_last_seq
        )
        self._wrote(stored)
        self._publish(items_persisted=pb.ItemsPersisted(last_seq=last_seq, entries=count))
        await self._save("input_persisted", {"session_seq": last_seq}, session_last_seq=last_seq)

    async def _read_context(self) -> list[spb.Entry]:
        """Return the session's context view (the copy brought up to date, or a full read).

        The copy is extended from the log's tail (one ListEntries after the known seq);
        with no copy, or a tail that could change it, the whole view is read (GetContext).
        """
        r, cache = self.r, self._context
        if cache.loaded:
            tail, last_seq = await self.deps.peers.tail(r.tenant, r.session_id, cache.last_seq)
            if cache.extend(tail, last_seq):
                return cache.entries()
        entries, last_seq, leaf = await self.deps.peers.context(r.tenant, r.session_id)
        cache.reset(entries, last_seq, leaf)
        return cache.entries()

    def _wrote(self, stored: list[spb.Entry] | None) -> None:
        """Extend the cached view with a batch as stored (None: not known, drop the copy)."""
        if stored is None:
            self._context.drop()
        else:
            self._context.extend(stored)

    async def _model_turn(self, turn: int) -> tuple[cpb.ModelResponse, Decision]:
        r = self.r
        self._publish(turn_started=pb.TurnStarted(turn=turn))
        self.r.phase = cpb.RUN_PHASE_PLANNING  # announced on every turn, not only on a change
        self._publish(phase_changed=pb.PhaseChanged(phase=cpb.RUN_PHASE_PLANNING))
        context = await self._interruptible(self._read_context())
        request = turnmod.build_request(r.agent, r.run_id, r.tenant, context)
        response = await self._interruptible(
            turnmod.stream_model(
                self.deps.peers,
                r.tenant,
                request,
                lambda text: self._publish(model_delta=pb.ModelDelta(text=text)),
            )
        )
        decision = self._decide(turn, response)
        self._publish(
            model_responded=pb.ModelResponded(
                response=response,
                decision=kind_out(decision.kind),  # type: ignore[arg-type]
                reason=decision.reason,
            )
        )
        payload = {"turn": turn, "response": _b64(response), "decision": str(decision.kind)}
        usage = turnmod.add_usage(r.usage, response.usage)
        if decision.kind == DecisionKind.TOOL_CALLS and decision.calls:
            # Written with the tool phase's first save, before any tool runs.
            self._defer("model_responded", payload, usage=usage)
        else:
            # A final answer or refusal goes to the session next: the response must be on
            # record first, or a takeover could ask again and log a different one.
            await self._save("model_responded", payload, usage=usage)
        return response, decision

    async def _tool_phase(
        self,
        turn: int,
        decision: Decision,
        concurrency: int,
        max_tool_calls: int,
        *,
        announced: bool = False,
    ) -> list[cpb.ToolResult] | None:
        """Run the turn's calls, or suspend the run when one waits for an answer.

        `announced` is True when the log holds this turn's tools_started: its tool_called
        events were stored in that same transaction, so a takeover re-sending the calls
        publishes only their tool_returned, and a viewer sees each call started once.

        Returns:
            The calls' results in call order, or None when the run suspended.
        """
        r = self.r
        specs = {s.name: s for s in offered_specs(r.agent)}
        budget = max_tool_calls - r.tool_calls if max_tool_calls else None
        policies = command_policies(r.agent)
        planned = plan_calls(decision.calls, specs, set(r.always_approved), r.answers, budget, policies)
        waiting = pending_calls(planned)
        if waiting:
            staged = [self.channel.stage(turn, run_suspended=pb.RunSuspended(pending_calls=waiting))]
            await self._save(
                "suspended",
                {"turn": turn, "pending": [p.call.call_id for p in waiting]},
                staged=staged,
                status=cpb.RUN_STATUS_SUSPENDED,
                pending=waiting,
                lease_owner="",
                lease_expires_s=0.0,
            )
            return None
        self._phase(cpb.RUN_PHASE_EXECUTING_TOOLS)
        if not announced:
            for p in planned:
                self._publish(tool_called=pb.ToolCalled(call=call_out(p.call)))
        await self._save(
            "tools_started", {"turn": turn, "calls": [p.call.call_id for p in planned if p.runs]}
        )
        results = await self._interruptible(
            execute_calls(
                planned,
                peers=self.deps.peers,
                tenant=r.tenant,
                run_id=r.run_id,
                workspace=r.workspace,
                concurrency=concurrency,
                on_result=lambda res: self._publish(tool_returned=pb.ToolReturned(result=res)),
                on_progress=lambda call_id, stream, text: self._publish(
                    tool_progressed=pb.ToolProgressed(call_id=call_id, stream=stream, text=text)
                ),
            )
        )
        self._defer(
            "tools_finished",
            {"turn": turn, "results": [_b64(x) for x in results]},
            tool_calls=r.tool_calls + sum(1 for p in planned if p.runs),
        )
        return results

    async def _save_turn(
        self,
        turn: int,
        response: cpb.ModelResponse,
        decision: Decision,
        results: list[cpb.ToolResult],
        consume: tuple[str, ...],
    ) -> bool:
        """Write the turn's batch and reach the save point (004 §2.3a).

        Returns True when injected input that extends a finishing run was consumed.
        """
        r = self.r
        queued = [i for i in await self.deps.store.pending_input(r.run_id) if i.get("kind") in consume]
        entries = turn_entries(r.run_id, turn, r.agent.name, response, decision, results)
        entries += [injected_entry(r.run_id, turn, r.agent.name, i["text"], i["id"]) for i in queued]
        last_seq, count, stored = await write_batch(
            self.deps.peers, r.tenant, r.session_id, entries, r.session_last_seq
        )
        self._wrote(stored)
        self._publish(items_persisted=pb.ItemsPersisted(last_seq=last_seq, entries=count))
        errors = r.consecutive_error_turns
        if results:
            failed = [x.is_error and x.status != cpb.TOOL_RESULT_STATUS_DENIED for x in results]
            errors = errors + 1 if all(failed) else 0
        await self._save(
            "turn_persisted",
            {"turn": turn, "session_seq": last_seq, "entries": count, "injected": [i["id"] for i in queued]},
            turns=turn,
            session_last_seq=last_seq,
            consecutive_error_turns=errors,
            answers=pb.ResumeRunRequest(),
            pending=[],
            _drop_inputs=[i["id"] for i in queued],
        )
        return (
            any(i.get("kind") in ("steer", "follow_up") for i in queued)
            and decision.kind == DecisionKind.FINAL
        )

    async def _finish(
        self, status: int, *, final_output: str = "", failure: cpb.FailureInfo | None = None
    ) -> None:
        r = self.r
        phase = _TERMINAL_PHASE[status]  # type: ignore[index]
        left = await self.deps.store.pending_input(r.run_id)
        if left:
            self._publish(
                diagnostic=pb.Diagnostic(
                    code="injected_input_not_consumed",
                    message=f"{len(left)} injected input(s) arrived too late and were not delivered.",
                )
            )
        completed = pb.RunCompleted(
            status=status,  # type: ignore[arg-type]
            phase=phase,
            final_output=final_output,
            usage=r.usage,
            turns=r.turns,
            labels=r.labels,
        )
        if failure is not None:
            completed.failure.CopyFrom(failure)
        staged = [
            self.channel.stage(0, run_completed=completed),
            self.channel.stage(0, stream_end=pb.StreamEnd(status=status)),  # type: ignore[arg-type]
        ]
        self.r.phase = phase
        payload = {
            "status": status,
            "failure": _b64(failure) if failure else "",
            "reason": self.cancel_message,
        }
        await self._save(
            "completed",
            payload,
            staged=staged,
            status=status,
            final_output=final_output,
            failure=failure,
            pending=[],
            lease_owner="",
            lease_expires_s=0.0,
        )

    async def _end_quietly(self, status: int, *, failure: cpb.FailureInfo | None = None) -> None:
        try:
            await self._finish(status, failure=failure)
        except LeaseLost:
            log.info("run %s: lease lost before it could end", self.r.run_id)
        except Exception:  # noqa: BLE001 - the run stays RUNNING and is taken over later
            log.exception("run %s: could not record its end", self.r.run_id)
