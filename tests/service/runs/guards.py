"""Helpers of the guardrail tests: guardrail specs, the judge's requests, reading results back."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.pairing import system_text

IN, OUT = pb.GUARDRAIL_STAGE_INPUT, pb.GUARDRAIL_STAGE_OUTPUT
TOOL_IN, TOOL_OUT = pb.GUARDRAIL_STAGE_TOOL_INPUT, pb.GUARDRAIL_STAGE_TOOL_OUTPUT
ALLOW, REPLACE, TRIP = pb.GUARDRAIL_DECISION_ALLOW, pb.GUARDRAIL_DECISION_REPLACE, pb.GUARDRAIL_DECISION_TRIP
BLOCKING, RACING = pb.GUARDRAIL_INPUT_MODE_BLOCKING, pb.GUARDRAIL_INPUT_MODE_RACING
#: What every judge request's system text says (core.guardrails.judge_request).
JUDGE_MARK = "You are a guardrail."


def pattern(
    name: str, stages, patterns, *, replacement: str = "", message: str = "", mode: int = 0
) -> pb.Guardrail:
    """A pattern guardrail: REPLACE when a replacement is given, else TRIP."""
    rule = pb.PatternGuardrail(
        patterns=list(patterns),
        on_match=REPLACE if replacement else TRIP,
        replacement=replacement,
        message=message,
    )
    return pb.Guardrail(name=name, stages=list(stages), input_mode=mode, pattern=rule)  # type: ignore[arg-type]


def judge(
    name: str, stages, *, prompt: str = "Refuse anything about weapons.", mode: int = 0
) -> pb.Guardrail:
    """A model guardrail on the agent's model."""
    return pb.Guardrail(
        name=name,
        stages=list(stages),
        input_mode=mode,  # type: ignore[arg-type]
        model=pb.ModelGuardrail(prompt=prompt),
    )


def verdict(decision: str, message: str = "", **kw: Any) -> Reply:
    """A judge's reply: the verdict object as text."""
    kw.setdefault("input_tokens", 7)
    kw.setdefault("output_tokens", 3)
    return Reply(text=json.dumps({"decision": decision, "message": message}), **kw)


def is_judge(path: str, body: Any) -> bool:
    """True for a model guardrail's request."""
    return isinstance(body, dict) and JUDGE_MARK in system_text(path, body)


def model_calls(mesh) -> list[tuple[str, Any]]:
    """The agent's own model requests (the judges' left out), in order."""
    return [
        (p, b) for p, b in mesh.emu.requests if p.endswith(("/responses", "/messages")) and not is_judge(p, b)
    ]


def judge_calls(mesh) -> list[tuple[str, Any]]:
    """The judges' requests, in order."""
    return [
        (p, b) for p, b in mesh.emu.requests if p.endswith(("/responses", "/messages")) and is_judge(p, b)
    ]


def results(events: list[pb.RunEvent]) -> list[pb.GuardrailResult]:
    """The guardrail_result events of a stream, in order."""
    return [e.guardrail_result for e in events if e.WhichOneof("payload") == "guardrail_result"]


def judged_by(reply: Callable[[str, Any], Reply], *, after_model_call: bool = False, timeout_s: float = 20.0):
    """A responder answering the judges with `reply(path, body)`, the rest from the script.

    With `after_model_call`, a judge is answered only once the agent's own model request
    has reached the emulator (the model call is in flight), which is how a test makes a
    racing guardrail decide while the call runs.
    """
    arrived = threading.Event()

    def respond(path: str, body: Any) -> Reply | None:
        if not is_judge(path, body):
            arrived.set()
            return None
        if after_model_call:
            arrived.wait(timeout_s)
        return reply(path, body)

    respond.arrived = arrived  # type: ignore[attr-defined]
    return respond


def texts(entries) -> list[str]:
    """Every text of a session's entries (messages and tool results), in order."""
    out = []
    for e in entries:
        if e.item.HasField("message"):
            out += [b.text.text for b in e.item.message.content if b.WhichOneof("block") == "text"]
        elif e.item.HasField("tool_result"):
            out.append(e.item.tool_result.content)
    return out


def usage_of(run: pb.Run) -> tuple[int, int, int]:
    """(input, output, requests) of a run's total usage."""
    return run.usage.input_tokens, run.usage.output_tokens, run.usage.requests


def nested_of(run: pb.Run) -> tuple[int, int, int]:
    """(input, output, requests) of a run's nested usage."""
    return run.nested_usage.input_tokens, run.nested_usage.output_tokens, run.nested_usage.requests


def details(run: pb.Run) -> dict[str, str]:
    """The failure's details_json as a dict."""
    return json.loads(run.failure.details_json or "{}")
