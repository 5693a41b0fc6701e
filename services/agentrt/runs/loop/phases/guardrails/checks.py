"""What a guardrail stage consults and how (004 §2.6, §2.7f): selection, one check, the two orders.

The pure rules (decisions, gates, the race, pattern evaluation, the judge's verdict) are
`core/guardrails.py` and `core/input_race.py`; this module applies them to a snapshot and
makes the one I/O a guardrail needs, a model guardrail's call through the gateway:

- selection: `input_checks` (the entry agent's, blocking or racing), `stage_checks` (the
  output stage), `tool_checks` (a tool stage: the agent's guardrails, then the AgentTool's,
  004 §2.6 placement), `tool_subjects` (the planned calls a tool stage inspects);
- `consult`: one guardrail on one text, never raising (an error of the guardrail, a judge
  that failed or answered no verdict, an unexpected exception are results with `error`, so
  they fail the run closed and never the process); a model guardrail's tokens come back
  with it (nested usage, 004 §2.7f);
- `run_parallel` (input and output: all at once, fail fast, cancelled ones reported) and
  `run_sequential` (tool stages: in order, stopping at the first Replace or Trip);
- the run-log form of a consulted guardrail (`consulted_out` / `consulted_in`), so a
  resume or a takeover reads what was decided instead of asking again;
- `ending` / `replacement` read a stage's outcome off its results (the run's structured
  failure for an ending one, kind `guardrail_tripped` or `guardrail_failed`, details
  naming the guardrail, stage, scope and call, is `failures.guardrail_failure`);
- what a Replace changes: `input_view` (a racing input Replace in what later turns render),
  `replaced_response` and `replaced_calls` (an output Replace as the session's answer).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentrt.core.decide import Call
from agentrt.core.errors import MeshError
from agentrt.core.guardrails import (
    SCOPE_AGENT,
    SCOPE_TOOL,
    VERDICT_SCHEMA,
    Decision,
    ParallelGate,
    PatternRule,
    Result,
    SequentialGate,
    Stage,
    evaluate_pattern,
    judge_request,
    verdict_result,
)
from agentrt.core.structured import FINAL_OUTPUT_TOOL
from agentrt.mesh import telemetry
from agentrt.runs.convert.model import display_extra, text_of
from agentrt.runs.loop.persistence import RUNTIME_DETAILS
from agentrt.runs.loop.phases.tools import Planned
from agentrt.runs.peers.client import Peers
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

#: A model guardrail's default cap on its verdict, in tokens (ModelGuardrail.max_output_tokens 0).
JUDGE_MAX_TOKENS = 512
_STAGE = {
    Stage.INPUT: pb.GUARDRAIL_STAGE_INPUT,
    Stage.OUTPUT: pb.GUARDRAIL_STAGE_OUTPUT,
    Stage.TOOL_INPUT: pb.GUARDRAIL_STAGE_TOOL_INPUT,
    Stage.TOOL_OUTPUT: pb.GUARDRAIL_STAGE_TOOL_OUTPUT,
}
#: State key of a racing input guardrail's replacement ({"text"}), applied from turn 2 on.
INPUT_REPLACED = "guardrail_input"


# -- selection ----------------------------------------------------------------------------


def _declares(g: pb.Guardrail, stage: Stage) -> bool:
    return _STAGE[stage] in g.stages


def input_checks(entry: pb.AgentSpec, *, blocking: bool) -> list[pb.Guardrail]:
    """Return the entry agent's input guardrails of one mode, in declaration order.

    Racing is the default (input_mode UNSPECIFIED or RACING); BLOCKING runs before the call.
    """
    return [
        g
        for g in entry.guardrails
        if _declares(g, Stage.INPUT) and (g.input_mode == pb.GUARDRAIL_INPUT_MODE_BLOCKING) == blocking
    ]


def stage_checks(snap: pb.AgentSpec, stage: Stage) -> list[pb.Guardrail]:
    """Return the agent's guardrails of a stage, in declaration order."""
    return [g for g in snap.guardrails if _declares(g, stage)]


def tool_checks(snap: pb.AgentSpec, tool: str, stage: Stage) -> list[tuple[pb.Guardrail, str]]:
    """Return (guardrail, scope) of a tool stage for one tool: the agent's, then the tool's."""
    out = [(g, SCOPE_AGENT) for g in stage_checks(snap, stage)]
    for t in snap.tools:
        if t.name == tool:
            out += [(g, SCOPE_TOOL) for g in t.guardrails if _declares(g, stage)]
    return out


def tool_subjects(planned: Sequence[Planned], snap: pb.AgentSpec, stage: Stage) -> list[int]:
    """Return the indices (call order) of the planned calls a tool stage inspects.

    tool_input: a call that would execute (it runs, or waits for an approval or a client's
    result) and has guardrails of the stage. tool_output: a call that ran, or one a client
    answered (not one the runtime answered), with guardrails of the stage.
    """
    out = []
    for i, p in enumerate(planned):
        if stage == Stage.TOOL_INPUT:
            inspected = p.runs or bool(p.pending)
        else:
            client = p.spec is not None and p.spec.external and p.result is not None
            inspected = p.runs or (client and p.result.details_json != RUNTIME_DETAILS)  # type: ignore[union-attr]
        if inspected and tool_checks(snap, p.call.name, stage):
            out.append(i)
    return out


# -- one check ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Consulted:
    """One consulted guardrail: its result, its wall time (seconds), a model guardrail's tokens."""

    result: Result
    duration_s: float = 0.0
    usage: cpb.Usage | None = None


def _rule(g: pb.Guardrail) -> PatternRule:
    p = g.pattern
    on_match = Decision.REPLACE if p.on_match == pb.GUARDRAIL_DECISION_REPLACE else Decision.TRIP
    return PatternRule(g.name, tuple(p.patterns), on_match, p.replacement, p.message)


async def _judge(
    peers: Peers, tenant: str, run_id: str, model: cpb.ModelRef, g: pb.Guardrail, stage: Stage, text: str,
    call_id: str, scope: str, call_key: str, stops_call: Callable[[], bool] | None,
) -> tuple[Result, cpb.Usage | None]:  # fmt: skip
    m = g.model
    system, user = judge_request(m.prompt, stage, text)
    request = gpb.ModelRequest(
        model=m.model if m.model.provider else model,
        system=system,
        messages=[cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=user))])],
        settings=cpb.ModelSettings(
            max_output_tokens=m.max_output_tokens or JUDGE_MAX_TOKENS,
            output_json_schema=json.dumps(VERDICT_SCHEMA),
        ),
        tenant=tenant,
        run_id=run_id,
        idempotency_key=call_key,
    )
    try:
        answer = await peers.generate_once(tenant, request, stops_call)
    except MeshError as err:
        error = f"the judge model failed: {err.message}"
        return Result(g.name, stage, None, error=error, call_id=call_id, scope=scope), None
    usage = cpb.Usage()
    usage.CopyFrom(answer.response.usage)
    usage.requests = usage.requests or 1
    reply = text_of(answer.response.content)
    return verdict_result(g.name, stage, reply, call_id=call_id, scope=scope), usage


async def consult(
    peers: Peers,
    tenant: str,
    run_id: str,
    model: cpb.ModelRef,
    g: pb.Guardrail,
    stage: Stage,
    text: str,
    *,
    call_id: str = "",
    scope: str = SCOPE_AGENT,
    call_key: str = "",
    stops_call: Callable[[], bool] | None = None,
) -> Consulted:
    """Consult one guardrail on `text`; never raises but CancelledError (module docstring).

    Args:
        peers: the gateway (a model guardrail's judge call, Generate).
        tenant: the run's tenant.
        run_id: the run (sent with the judge's request).
        model: the model of a judge that names none (the guarded agent's).
        g: the guardrail (validated: exactly one kind).
        stage: the stage inspected.
        text: the inspected text, whole.
        call_id: the inspected call (tool stages).
        scope: SCOPE_AGENT or SCOPE_TOOL.
        call_key: the judge call's idempotency key (`model.judge_call_key`; "" = unkeyed), so a
            takeover's repeat is answered from the gateway's journal, never billed twice.
        stops_call: whether a cancellation stops the keyed judge call at the gateway
            (Peers.generate_once; None: never).

    Returns:
        The result, its wall time and a model guardrail's usage (None for a pattern).
    """
    started = time.monotonic()
    kind = "tool" if stage in (Stage.TOOL_INPUT, Stage.TOOL_OUTPUT) else str(stage)
    usage: cpb.Usage | None = None
    with telemetry.guardrail_span(g.name, kind=kind) as span:
        try:
            if g.WhichOneof("kind") == "pattern":
                result = evaluate_pattern(_rule(g), stage, text, call_id=call_id, scope=scope)
            else:
                result, usage = await _judge(
                    peers, tenant, run_id, model, g, stage, text, call_id, scope, call_key, stops_call
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing guardrail fails the run (closed), never the process
            error = f"the guardrail failed: {exc!r}"[:1000]
            result = Result(g.name, stage, None, error=error, call_id=call_id, scope=scope)
        span.set("agentrt.guardrail.tripped", result.decision == Decision.TRIP)
    return Consulted(result, time.monotonic() - started, usage)


#: Consults one guardrail (with its scope) of a stage on the stage's text.
Ask = Callable[[pb.Guardrail, str], Awaitable[Consulted]]


async def run_parallel(checks: Sequence[pb.Guardrail], stage: Stage, ask: Ask) -> list[Consulted]:
    """Consult a concurrent stage's guardrails at once, failing fast (004 §2.6).

    The first result that ends the run (a tripwire, an error) ends the wait; the rest are
    cancelled and reported as cancelled. Returns one Consulted per guardrail, in
    declaration order (names are unique: validation).
    """
    gate = ParallelGate([g.name for g in checks], stage)
    started = time.monotonic()
    order = {g.name: i for i, g in enumerate(checks)}
    tasks = [asyncio.ensure_future(ask(g, SCOPE_AGENT)) for g in checks]
    got: dict[str, Consulted] = {}
    try:
        pending = set(tasks)
        while pending and not gate.done:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: tasks.index(t)):
                if gate.done:
                    break
                consulted = task.result()
                got[consulted.result.guardrail] = consulted
                gate.offer(consulted.result)
    finally:
        left = [t for t in tasks if not t.done()]
        for task in left:
            task.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)
    elapsed = time.monotonic() - started
    cancelled = [Consulted(r, elapsed) for r in gate.cancelled()]
    answered = [got[r.guardrail] for r in gate.results]
    return sorted(answered + cancelled, key=lambda c: order[c.result.guardrail])


async def run_sequential(checks: Sequence[tuple[pb.Guardrail, str]], ask: Ask) -> list[Consulted]:
    """Consult a tool stage's guardrails in order, stopping at the first Replace or Trip (004 §2.6).

    Returns the consulted ones, in order; those after the stop are not consulted (no result).
    """
    gate = SequentialGate([(g.name, scope) for g, scope in checks])
    out: list[Consulted] = []
    while gate.next() is not None:
        g, scope = checks[len(out)]
        consulted = await ask(g, scope)
        gate.offer(consulted.result)
        out.append(consulted)
    return out


# -- outcomes -----------------------------------------------------------------------------


def ending(results: Sequence[Result]) -> Result | None:
    """Return the result that ends the run (a tripwire or an error), or None."""
    return next((r for r in results if r.ends_run), None)


def replacement(results: Sequence[Result]) -> Result | None:
    """Return the stage's Replace (the first in order) when nothing ends the run, else None."""
    if ending(results) is not None:
        return None
    return next((r for r in results if r.decision == Decision.REPLACE), None)


# -- what the model and the session get ----------------------------------------------


def input_view(entries: list[spb.Entry], run_id: str, state: dict[str, Any]) -> list[spb.Entry]:
    """Return the context with a racing guardrail's replacement in place of the run's input.

    Only what the model reads changes (a copy of the input entry); the session keeps the
    input as sent. Without a replacement in the state, `entries` itself.
    """
    replaced = state.get(INPUT_REPLACED)
    if not replaced:
        return entries
    out = []
    for e in entries:
        if e.run_id == run_id and e.item.HasField("message") and display_extra(e).get("batch") == "input":
            e = _copy(e)
            del e.item.message.content[:]
            e.item.message.content.append(cpb.ContentBlock(text=cpb.TextBlock(text=str(replaced["text"]))))
        out.append(e)
    return out


def _copy(entry: spb.Entry) -> spb.Entry:
    out = spb.Entry()
    out.CopyFrom(entry)
    return out


def replaced_calls(calls: Sequence[Call], text: str) -> tuple[Call, ...]:
    """Return a turn's calls with each final-output tool call's arguments replaced by `text`.

    An output Replace of a structured answer made through the final-output tool (decision
    0006): the session keeps the call, its arguments {"output": <replacement>} (a JSON object,
    which every provider accepts when the conversation is sent again), never the original.
    Other calls are kept as they are.
    """
    swapped = json.dumps({"output": text})
    return tuple(
        replace(c, arguments=swapped, invalid_arguments="", invalid_base64=False)
        if c.name == FINAL_OUTPUT_TOOL
        else c
        for c in calls
    )


def replaced_response(response: cpb.ModelResponse, text: str) -> cpb.ModelResponse:
    """Return the response with its text replaced by an output guardrail's replacement.

    The text, and the reasoning that led to it (thinking and raw provider blocks, which may
    hold the very content replaced), give way to one block holding `text` (none when the
    response had no text but tool calls: the final-output tool, see `replaced_calls`); tool
    calls are kept. The session's final answer is the replacement, never the original.
    """
    out = cpb.ModelResponse()
    out.CopyFrom(response)
    kept = [b for b in response.content if b.WhichOneof("block") == "tool_use"]
    said = any(b.WhichOneof("block") == "text" for b in response.content)
    del out.content[:]
    out.content.extend(kept)
    if said or not kept:  # an answer made only through the final-output tool gains no text
        out.content.append(cpb.ContentBlock(text=cpb.TextBlock(text=text)))
    return out
