"""The model half of a turn: build the request, stream the call, count usage and budgets.

- `build_request`: render the session's context (seed 000) into a provider-neutral
  ModelRequest with the snapshot's instructions, tools and settings (004 §2.3b: the turn
  reads the snapshot, never a live agent).
- `stream_model`: one StreamGenerate call; text deltas go to a callback as they arrive;
  the final response is returned. A stream with no final response is an error: nothing
  partial is ever accepted (gateway contract). A context overflow, whether the gateway
  refused the request (CONTEXT_OVERFLOW) or the provider stopped at the window
  (model_context_window_exceeded), is raised as `ContextOverflow` (004 §2.5g).
- `model_call_key` / `judge_call_key`: the keys of the gateway's model-call journal.
- `add_usage`, `check_budget`: the run's usage total; the turn and time budgets (004 §2.9).
The failures a turn ends a run with are made in runs/loop/failures.py.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from agentrt.core import render
from agentrt.core.decide import is_overflow
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.convert.history import history_of
from agentrt.runs.convert.model import messages_out, response_in
from agentrt.runs.loop.failures import ContextOverflow, RunFailed, failure
from agentrt.runs.loop.phases import handoff as handoff_phase
from agentrt.runs.loop.phases.structured import TurnShape
from agentrt.runs.peers.client import Peers
from agentrt.runs.spec.agents import limits_of, offered_specs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb


def build_request(
    snap: pb.AgentSpec,
    run_id: str,
    tenant: str,
    entries: list[spb.Entry],
    shape: TurnShape | None = None,
    state: dict[str, Any] | None = None,
    call_key: str = "",
) -> gpb.ModelRequest:
    """Return the turn's ModelRequest rendered from the session's context entries.

    `call_key` is the request's idempotency key for the gateway's model-call journal
    (`model_call_key`): the same on every replica that renders this turn from this context,
    so a takeover's repeat is answered from the journal, never asked again.

    `shape` (runs/loop/phases/structured.py) says which tools the turn offers and whether
    it asks for the output schema as a response format; None = the snapshot's tools and
    its schema as the format. `state` (the run's) carries the last handoff: its target's
    input filter changes what is rendered, never the entries (runs/loop/phases/handoff.py).

    Raises:
        ValueError: the context does not open with a user message (a bug upstream).
    """
    if shape is None:
        shape = TurnShape(offered_specs(snap), response_format=snap.output_json_schema)
    limits = limits_of(snap)
    history: list[Any] = history_of(entries)
    cut_seq = handoff_phase.handoff_seq(state or {})
    if cut_seq is not None:
        until = len(history_of([e for e in entries if e.seq <= cut_seq]))
        history = handoff_phase.view(history, until, state or {})
    messages = render.messages(
        history, recent_results=limits.recent_results, result_max_bytes=limits.result_max_bytes
    )
    settings = cpb.ModelSettings()
    settings.CopyFrom(snap.settings)
    if snap.tool_call_mode == pb.TOOL_CALL_MODE_SINGLE:
        settings.disable_parallel_tool_calls = True
    if shape.response_format and not settings.output_json_schema:
        settings.output_json_schema = shape.response_format
    elif not shape.response_format and snap.output_json_schema:
        settings.output_json_schema = ""  # the final-output tool asks for it instead
    if shape.tool_free and shape.tools:
        settings.tool_choice.CopyFrom(cpb.ToolChoice(mode=cpb.TOOL_CHOICE_MODE_NONE))
    return gpb.ModelRequest(
        model=snap.model,
        system=snap.instructions,
        messages=messages_out(messages),
        tools=shape.tools,
        settings=settings,
        tenant=tenant,
        run_id=run_id,
        idempotency_key=call_key,
    )


def model_call_key(run_id: str, turn: int, context_seq: int, context_leaf: str) -> str:
    """Return the model-call key of a turn's request: run, turn, and the context it renders.

    A new context (a compaction, a steer written before the request) is a new request,
    hence a new key; the same context on another replica is the same key. At most ~200
    characters (ids are bounded), no control character (the gateway's rules).
    """
    return f"{run_id}/turn-{turn}/ctx-{context_seq}-{context_leaf}"


def judge_call_key(run_id: str, log_key: str, scope: str, index: int, name: str) -> str:
    """Return the model-call key of a model guardrail's judge call (decision 0019 addendum).

    `log_key` is the stage decision's run-log key (`guardrails.log.key_of`: stage, turn,
    call, input mode), `scope` SCOPE_AGENT or SCOPE_TOOL, `index` the guardrail's place in
    the stage's checks (0-based) and `name` its name: every replica that consults this
    guardrail for this decision sends the same key, so a takeover's repeat is answered from
    the gateway's journal. A key that would pass 256 characters or hold a control character
    (a long call id or name) carries the SHA-256 of its tail instead.
    """
    tail = f"{log_key}/{scope}-{index}-{name}"
    key = f"{run_id}/guardrail-{tail}"
    if len(key) > 256 or any(ord(c) < 32 or ord(c) == 127 for c in key):
        key = f"{run_id}/guardrail-{hashlib.sha256(tail.encode()).hexdigest()}"
    return key


async def stream_model(
    peers: Peers,
    tenant: str,
    request: gpb.ModelRequest,
    on_delta: Callable[[str], None],
    on_wait: Callable[[MeshError, float], None] | None = None,
    stops_call: Callable[[], bool] | None = None,
) -> gpb.GenerateResponse:
    """Make the turn's model call; return its final answer (response, retries, queue wait).

    `on_wait(error, waited seconds)` is called each time the call is re-sent after the
    gateway's stores did not answer; `stops_call()` says whether a cancellation of this
    call should stop it at the gateway too (Peers.generate).

    Raises:
        ContextOverflow: the gateway's CONTEXT_OVERFLOW, or a response the context window
            stopped (never taken as a truncation).
        MeshError: the gateway's other errors, or UNAVAILABLE/PROVIDER_UNAVAILABLE when the
            stream ended without a final response.
    """

    def on_message(message: gpb.StreamGenerateResponse) -> None:
        if message.WhichOneof("event") == "text_delta" and message.text_delta:
            on_delta(message.text_delta)

    try:
        last = await peers.generate_final(tenant, request, on_message, on_wait, stops_call)
    except MeshError as err:
        if err.reason == Reason.CONTEXT_OVERFLOW:
            raise ContextOverflow(err.message) from err
        raise
    final = last.final if last is not None else None
    if final is None:
        raise MeshError(
            Status.UNAVAILABLE, Reason.PROVIDER_UNAVAILABLE, "the model stream ended without a response"
        )
    if is_overflow(response_in(final.response)):
        stop = final.response.provider_stop_reason or "model_context_window_exceeded"
        raise ContextOverflow(f"the model stopped at its context window ({stop})", final.response.usage)
    return final


def add_usage(total: cpb.Usage, usage: cpb.Usage) -> cpb.Usage:
    """Return total + usage (a response that reports no request count counts as one)."""
    out = cpb.Usage()
    out.CopyFrom(total)
    out.input_tokens += usage.input_tokens
    out.output_tokens += usage.output_tokens
    out.cached_input_tokens += usage.cached_input_tokens
    out.reasoning_tokens += usage.reasoning_tokens
    out.requests += usage.requests or 1
    return out


def check_budget(turn: int, max_turns: int, budget_s: float, created_s: float) -> None:
    """Refuse a model call beyond the turn budget or the time budget (004 §2.9).

    Raises:
        RunFailed: kind "max_turns", or "timeout" (retryable) once budget_s seconds have
            passed since created_s; budget_s 0 = no time budget.
    """
    if turn > max_turns:
        raise RunFailed(failure("max_turns", f"The run used its {max_turns} turns without a final answer."))
    if budget_s and time.time() - created_s > budget_s:
        raise RunFailed(failure("timeout", "The run used its time budget.", retryable=True))
