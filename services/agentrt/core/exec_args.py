"""exec_command's arguments, checked as the tool decodes them (004 §2.7l, §2.7j).

Shared by the run loop's approval gate (`check_exec_call`, on the call's exact argument
string) and the tool service (`check_exec_args`, on the decoded object): a call refused
here is refused by both, and the command text then goes through the command policies
(agentrt.core.policy). Invariants: standard library only, besides core.policy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentrt.core.policy import CommandPolicy, Refusal, check_command

_RESEND = "Resend the call with the arguments as one JSON object."
_SENTINEL_STRINGS = ("workdir", "session_id")


def _arguments_refused(message: str) -> Refusal:
    return Refusal("", "arguments", "", -1, message)


def exec_arguments_problem(args: dict[str, Any]) -> str | None:
    """Return why exec_command cannot use decoded arguments, or None when it can.

    The rules (004 §2.7l): `cmd` is a non-empty string; `workdir` and `session_id` are
    strings or one of the zero-value sentinels null, 0, false; none of them holds a NUL
    character; `timeout_ms`, when set, is an integer >= 1. Unknown keys are ignored.
    """
    cmd = args.get("cmd")
    if cmd is None:
        return '"cmd" is required: a non-empty string.'
    if not isinstance(cmd, str):
        return f'"cmd" must be a string, not {json.dumps(cmd)}.'
    if not cmd:
        return '"cmd" must not be empty.'
    for name in _SENTINEL_STRINGS:
        value = args.get(name)
        if value is None or value is False or (type(value) is int and value == 0) or isinstance(value, str):
            continue
        return f'"{name}" must be a string (or null), not {json.dumps(value)}.'
    for name in ("cmd", *_SENTINEL_STRINGS):
        value = args.get(name)
        if isinstance(value, str) and "\x00" in value:
            return f'"{name}" must not contain NUL characters (\\u0000); resend it without them.'
    timeout = args.get("timeout_ms")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or int(timeout) != timeout:
            return f'"timeout_ms" must be an integer, not {json.dumps(timeout)}.'
        if timeout < 1:
            return f'"timeout_ms" must be at least 1, not {json.dumps(timeout)}.'
    return None


def check_exec_args(args: dict[str, Any], policies: Iterable[CommandPolicy]) -> Refusal | None:
    """Return why exec_command refuses a call with decoded args, or None when it may run.

    Undecodable arguments refuse first (rule "arguments"); then each policy in order.
    """
    problem = exec_arguments_problem(args)
    if problem is not None:
        return _arguments_refused(problem)
    return check_command(args["cmd"], policies)


def check_exec_call(arguments: str, policies: Iterable[CommandPolicy]) -> Refusal | None:
    """Return why exec_command would refuse a call given its exact argument string.

    The argument string decodes as the tool decodes it: "" and "null" are {} (and so
    lack `cmd`); text that is not JSON, or JSON that is not an object, refuses. This is
    what the run loop's approval gate asks (004 §2.7j, §2.7l): a call refused here is
    refused as a result by the tool service, so it never needs a person's approval —
    provided the refusal is `definite`. A "timeout" refusal is not: the tool service's own
    check may finish inside its budget, so a gate that skipped approval on a timeout could
    let a command run that nobody approved. The gate asks instead; the tool service then
    refuses (its own timeout) or decides as usual.
    """
    text = arguments.strip()
    if not text or text == "null":
        return _arguments_refused('"cmd" is required: a non-empty string.')
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return _arguments_refused(f"The arguments of exec_command are not valid JSON ({exc}). {_RESEND}")
    if not isinstance(value, dict):
        return _arguments_refused(
            f"The arguments of exec_command must be a JSON object, not {type(value).__name__}. {_RESEND}"
        )
    return check_exec_args(value, policies)
