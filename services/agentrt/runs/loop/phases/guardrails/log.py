"""A guardrail stage's decision in the run log: consulted once, recorded before it is acted on (004 §2.6).

`GuardrailLog` is the executor's layer under the stages (runs/loop/phases/guardrails/steps.py,
`GuardrailSteps`). Every consulted guardrail leaves a durable `guardrail_result` event and
a run-log entry (`LOG_KIND`, keyed by `key_of`: stage, turn, call and input mode), written
in one save before the verdict is acted on (`_record`); a resume or a takeover reads the
log (`_decided`) instead of asking again, so a model guardrail is never billed twice for
one decision, and a tripwire recorded before a crash fails the run on the new owner
without a model call. A judge call still in flight then is keyed
(`model.judge_call_key`): the gateway's journal answers the new owner's repeat (decision
0019 addendum). A model guardrail's tokens count into the run's usage and its nested usage
(state `NESTED_USAGE`, `_announce`).

The log form of a consulted guardrail: `consulted_out` / `consulted_in`, its usage
`usage_out` / `usage_in`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt.core.guardrails import SCOPE_AGENT, Decision, Result, Stage
from agentrt.runs.events import build as events
from agentrt.runs.loop.failures import RunFailed, guardrail_failure
from agentrt.runs.loop.housekeeping import Housekeeping
from agentrt.runs.loop.phases import handoff as handoff_phase
from agentrt.runs.loop.phases import model as turnmod
from agentrt.runs.loop.phases.guardrails.checks import (
    Consulted,
    consult,
    ending,
    run_parallel,
    run_sequential,
)
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: Run-log kind of a decided guardrail stage: {"key", "turn", "results": [consulted_out...]}.
LOG_KIND = "guardrail_results"
#: State key of the nested usage ({field: n}; convert/run.py run_out reads it into Run.nested_usage).
NESTED_USAGE = "nested_usage"
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens", "requests")


class GuardrailLog(Housekeeping):
    """Guardrail decisions consulted once and kept in the run log (see the module docstring)."""

    #: Decided stages read from and written to the run log: key -> consulted (log form).
    _guard_log: dict[str, list[dict[str, Any]]] | None = None

    @property
    def _snap(self) -> pb.AgentSpec:
        return handoff_phase.current_agent(self.r.state, self.r.agent)

    async def _decided(self, key: str) -> list[Consulted] | None:
        """Return a stage's decision as the run log has it, or None (read once per executor)."""
        if self._guard_log is None:
            log = await self.deps.store.read_log(self.r.run_id)
            self._guard_log = {str(p["key"]): p["results"] for _, kind, p in log if kind == LOG_KIND}
        found = self._guard_log.get(key)
        return None if found is None else [consulted_in(c) for c in found]

    def _announce(self, consulted: Sequence[Consulted]) -> None:
        """Publish each result (durable at the next save) and count a judge's tokens as nested usage."""
        for c in consulted:
            self._publish(guardrail_result=events.guardrail_result(c.result, c.duration_s, c.usage))
            if c.usage is not None and c.usage.ByteSize():
                r = self.r
                r.usage = turnmod.add_usage(r.usage, c.usage)
                nested = turnmod.add_usage(usage_in(r.state.get(NESTED_USAGE, {})), c.usage)
                self._deferred_changes["usage"] = r.usage
                self._defer_state(**{NESTED_USAGE: usage_out(nested)})

    async def _record(self, decided: Sequence[tuple[str, list[Consulted]]], *, save: bool = True) -> None:
        """Write fresh decisions (with their events and usage) before they are acted on.

        `save`: in a save of their own; False = with the next save, for a verdict nothing
        acts on before that save (tool_input's: the batch starts, or the run suspends or
        ends, only through a save).
        """
        if not decided:
            return
        payloads: list[dict[str, Any]] = []
        for key, consulted in decided:
            self._announce(consulted)
            payloads.append({"key": key, "turn": self.turn, "results": [consulted_out(c) for c in consulted]})
        for payload in payloads[:-1] if save else payloads:
            self._defer(LOG_KIND, payload)
        if save:
            await self._save(LOG_KIND, payloads[-1])
            if any(ending([c.result for c in consulted]) for _, consulted in decided):
                self.deps.crash("after_guardrail_tripped")
        assert self._guard_log is not None  # _decided ran first
        for payload in payloads:
            self._guard_log[str(payload["key"])] = payload["results"]

    async def _consult_stage(
        self,
        key: str,
        stage: Stage,
        text: str,
        checks: Sequence[tuple[pb.Guardrail, str]],
        *,
        call_id: str = "",
        interruptible: bool = True,
    ) -> tuple[list[Consulted], bool]:
        """Return a stage's consulted guardrails and whether they are fresh (not from the log)."""
        known = await self._decided(key)
        if known is not None:
            return known, False
        r, model = self.r, self._snap.model
        index = {(g.name, scope): i for i, (g, scope) in enumerate(checks)}

        async def ask(g: pb.Guardrail, scope: str) -> Consulted:
            call_key = turnmod.judge_call_key(r.run_id, key, scope, index[(g.name, scope)], g.name)
            return await consult(
                self.deps.peers, r.tenant, r.run_id, model, g, stage, text, call_id=call_id, scope=scope,
                call_key=call_key, stops_call=self._stops_judge,
            )  # fmt: skip

        if stage.concurrent:
            work = run_parallel([g for g, _ in checks], stage, ask)
        else:
            work = run_sequential(checks, ask)
        consulted = await (self._interruptible(work) if interruptible else work)
        return consulted, True

    def _stops_judge(self) -> bool:
        """Whether a cancelled judge call is stopped at the gateway: not on a lost lease or a drain."""
        return self.stop_reason in ("", "cancel")  # the next owner's repeat needs it journaled

    async def _stage(self, key: str, stage: Stage, text: str, checks: Sequence[pb.Guardrail]) -> list[Result]:
        """Consult (or replay) a concurrent stage and record it; fail the run on a tripwire or error.

        Raises:
            RunFailed: kind `guardrail_tripped` / `guardrail_failed`.
        """
        consulted, fresh = await self._consult_stage(key, stage, text, [(g, SCOPE_AGENT) for g in checks])
        if fresh:
            await self._record([(key, consulted)])
        results = [c.result for c in consulted]
        if (end := ending(results)) is not None:
            raise RunFailed(guardrail_failure(end))
        return results


def key_of(stage: Stage, turn: int, call_id: str = "", mode: str = "") -> str:
    """Return the run-log key of one stage's decision (one per stage, turn, call and input mode)."""
    return f"{stage}:{turn}:{call_id}:{mode}"


def usage_out(usage: cpb.Usage) -> dict[str, int]:
    """Return a Usage as the run state and log keep it ({field: count})."""
    return {f: int(getattr(usage, f)) for f in _USAGE_FIELDS}


def usage_in(value: dict[str, Any]) -> cpb.Usage:
    """Read a Usage written by `usage_out` (absent fields are 0)."""
    return cpb.Usage(**{f: int(value.get(f, 0)) for f in _USAGE_FIELDS})


def consulted_out(c: Consulted) -> dict[str, Any]:
    """Return a consulted guardrail as the run log keeps it (JSON)."""
    r = c.result
    out: dict[str, Any] = {
        "guardrail": r.guardrail,
        "stage": str(r.stage),
        "decision": str(r.decision) if r.decision else "",
        "message": r.message,
        "error": r.error,
        "call_id": r.call_id,
        "scope": r.scope,
        "duration_s": round(c.duration_s, 6),
    }
    if c.usage is not None:
        out["usage"] = usage_out(c.usage)
    return out


def consulted_in(value: dict[str, Any]) -> Consulted:
    """Read a consulted guardrail written by `consulted_out`."""
    decision = value.get("decision") or ""
    result = Result(
        str(value["guardrail"]),
        Stage(value["stage"]),
        Decision(decision) if decision else None,
        message=str(value.get("message", "")),
        error=str(value.get("error", "")),
        call_id=str(value.get("call_id", "")),
        scope=str(value.get("scope", SCOPE_AGENT)),
    )
    usage = usage_in(value["usage"]) if "usage" in value else None
    return Consulted(result, float(value.get("duration_s", 0.0)), usage)
