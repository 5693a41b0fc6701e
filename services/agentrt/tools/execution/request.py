"""An ExecuteTool request in domain terms, and whether it is well formed (004 §2.7, §2.7g).

Owns `ExecuteInput`, the checks every request passes before anything is looked up or run
(`validate`, `checked_key`), and the fingerprint that tells a repeat of a call from a
different call under a used key. Nothing here does I/O; every refusal is a MeshError
INVALID_ARGUMENT the caller must fix, and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from agentrt.core.errors import Reason, invalid, missing, quote
from agentrt.core.ids import valid_id
from agentrt.core.policy import CommandPolicy
from agentrt.tools.calls.args import CallInput
from agentrt.tools.calls.catalog import BY_NAME, ToolDef
from agentrt.tools.storage.store import CallKey

#: Receives ("stdout"|"stderr", text) progress chunks of a running call (004 §2.7g).
Emit = Callable[[str, str], None]
#: Highest execution attempt a caller may ask for (ExecuteToolRequest.attempt).
MAX_ATTEMPT = 1000


@dataclass(frozen=True)
class ExecuteInput:
    """An ExecuteTool request in domain terms.

    Attributes:
        run_id: the run; with call.call_id, the idempotency key.
        call: the call with its exact argument string.
        sandbox_id: the sandbox to run in, "" for none.
        workspace: absolute workspace directory when no sandbox ("" = the run's default).
        timeout_seconds: per-call timeout, seconds; 0 = the tool's default.
        max_output_bytes: output cap, bytes; 0 = the service default.
        command_policies: exec_command's policies, each of which a command must pass
            (the service's own, then the request's; 004 §2.7j).
        attempt: which execution of the call (0 = the first; a re-run is its own record).
    """

    run_id: str
    call: CallInput
    sandbox_id: str = ""
    workspace: str = ""
    timeout_seconds: float = 0.0
    max_output_bytes: int = 0
    command_policies: tuple[CommandPolicy, ...] = ()
    attempt: int = 0


def _check_attempt(attempt: int) -> None:
    if not 0 <= attempt <= MAX_ATTEMPT:
        raise invalid(Reason.INVALID_VALUE, f"attempt must be 0..{MAX_ATTEMPT}", field="attempt")


def checked_key(tenant: str, run_id: str, call_id: str, attempt: int) -> CallKey:
    """The journal key of (run_id, call_id, attempt) in tenant, once each part is well formed.

    Raises:
        MeshError: INVALID_ARGUMENT/MISSING_FIELD, INVALID_ID or INVALID_VALUE (attempt
            outside 0..MAX_ATTEMPT).
    """
    for name, value in (("run_id", run_id), ("call_id", call_id)):
        if not value:
            raise missing(name)
        if not valid_id(value):
            raise invalid(Reason.INVALID_ID, f"malformed {name} {quote(value)}", field=name)
    _check_attempt(attempt)
    return CallKey(tenant, run_id, call_id, attempt)


def validate(inp: ExecuteInput) -> ToolDef:
    """Check the request's shape and return its tool.

    Raises:
        MeshError: INVALID_ARGUMENT with MISSING_FIELD, INVALID_ID, INVALID_VALUE or UNKNOWN_TOOL.
    """
    if not inp.run_id:
        raise missing("run_id")
    if not valid_id(inp.run_id):
        raise invalid(Reason.INVALID_ID, f"malformed run_id {quote(inp.run_id)}", field="run_id")
    if not inp.call.call_id:
        raise missing("call.call_id")
    if not valid_id(inp.call.call_id):
        raise invalid(Reason.INVALID_ID, f"malformed call_id {quote(inp.call.call_id)}", field="call.call_id")
    _check_attempt(inp.attempt)
    if not inp.call.name:
        raise missing("call.name")
    tool = BY_NAME.get(inp.call.name)
    if tool is None:
        raise invalid(
            Reason.UNKNOWN_TOOL,
            f"unknown tool {inp.call.name[:64]!r}; ListTools names the catalog",
            tool=inp.call.name[:64],
        )
    # The target's shape, before any journal answers a repeat (a malformed request is refused
    # whatever is on record under its key; the sandbox manager checks the same again).
    if inp.sandbox_id and inp.workspace:
        raise invalid(Reason.INVALID_VALUE, "set sandbox_id or workspace, not both", field="workspace")
    if inp.sandbox_id and not valid_id(inp.sandbox_id):
        raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {quote(inp.sandbox_id)}", field="sandbox_id")
    if inp.timeout_seconds < 0:
        raise invalid(Reason.INVALID_VALUE, "timeout must not be negative", field="timeout")
    if inp.max_output_bytes < 0:
        raise invalid(Reason.INVALID_VALUE, "max_output_bytes must not be negative", field="max_output_bytes")
    return tool


def fingerprint(call: CallInput) -> str:
    """Hash of what makes a call this call: its tool and exact arguments."""
    data = json.dumps([call.name, call.arguments, call.invalid_arguments, call.invalid_arguments_base64])
    return hashlib.sha256(data.encode()).hexdigest()
