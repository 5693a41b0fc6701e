"""Bounds on what a request hands a run, checked when it arrives (issue 10).

What the session store would refuse at a save point (an entry over 3 MiB, an enum value
outside its enum, details that are not a JSON object, negative usage) is refused here,
when the request arrives, instead of failing the run afterwards.
"""

from __future__ import annotations

import json

from agentrt.core.errors import Reason, invalid
from agentrt.core.truncate import byte_len
from agentrt.mesh.durations import check_duration
from agentrt.runs.domain import Resume
from agentrt.v1 import common_pb2 as cpb

#: Most bytes of UTF-8 one text a request hands a run may hold (input, injected input, a
#: client tool's result, a denial's message): the session store takes 3 MiB per entry.
MAX_TEXT_BYTES = 2 * 1024 * 1024


def check_text_bytes(text: str, field: str) -> None:
    """Refuse text over MAX_TEXT_BYTES.

    Raises:
        MeshError: INVALID_ARGUMENT/REQUEST_TOO_LARGE naming `field`.
    """
    if len(text) * 4 > MAX_TEXT_BYTES and byte_len(text) > MAX_TEXT_BYTES:
        raise invalid(
            Reason.REQUEST_TOO_LARGE,
            f"{field} is {byte_len(text)} bytes; a run takes at most {MAX_TEXT_BYTES} bytes of it",
            field=field,
        )


def check_answers(req: Resume) -> None:
    """Refuse a ResumeRun whose decisions, results or reconciliations the session could not store.

    A reconciliation's SUPPLY_RESULT result and FAIL message are held to the same bounds as a
    client's result and a denial's message (they reach the session the same way).

    Raises:
        MeshError: INVALID_ARGUMENT with REQUEST_TOO_LARGE (a text over MAX_TEXT_BYTES),
            INVALID_VALUE (a status outside ToolResultStatus, negative nested usage, a
            malformed duration) or INVALID_JSON (details_json not a JSON object).
    """
    for i, d in enumerate(req.decisions):
        check_text_bytes(d.message, f"decisions[{i}].message")
    for i, r in enumerate(req.results):
        check_result(r, f"results[{i}]")
    for i, rec in enumerate(req.reconciliations):
        check_text_bytes(rec.message, f"reconciliations[{i}].message")
        if rec.HasField("result"):
            check_result(rec.result, f"reconciliations[{i}].result")


def check_result(r: cpb.ToolResult, where: str) -> None:
    """Refuse a tool result a request hands a run that the session could not store.

    Raises:
        MeshError: as `check_answers`, naming fields under `where` (e.g. `results[0]`).
    """
    check_text_bytes(r.content + r.summary, f"{where}.content")
    if r.status not in cpb.ToolResultStatus.values():
        raise invalid(
            Reason.INVALID_VALUE,
            f"{where}.status {r.status} is not a ToolResultStatus",
            field=f"{where}.status",
        )
    if r.details_json:
        try:
            details = json.loads(r.details_json)
        except (ValueError, RecursionError):
            details = None
        if not isinstance(details, dict):
            raise invalid(
                Reason.INVALID_JSON,
                f"{where}.details_json must be a JSON object",
                field=f"{where}.details_json",
            )
    if r.HasField("duration"):
        check_duration(r.duration, f"{where}.duration")
    usage = r.nested_usage
    if min(usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.reasoning_tokens) < 0:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{where}.nested_usage must not be negative",
            field=f"{where}.nested_usage",
        )
