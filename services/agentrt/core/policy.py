"""exec_command's command policy: allow/deny regular expressions (004 §2.7j, §2.7l).

Shared by the run loop (which checks a call before its approval gate) and the tool service
(which refuses the command as a result). Both decide through this module, so a call the
run loop lets skip approval is a call the tool service refuses.

Semantics of one `CommandPolicy`:
- Patterns are Python `re` syntax, searched anywhere in the command text (`re.search`).
- When any allow pattern is given, a command must match one of them.
- Deny is checked after allow, so a deny always wins.
- A policy with no patterns allows everything.
- A policy whose patterns do not compile refuses every command, naming the bad pattern:
  falling open would turn a typo into no protection at all, silently.
- A refusal names the rule (which policy, allow or deny, which pattern), so the model can
  ask for something else instead of trying variations.

It is a filter on approval noise, NOT a security boundary: a pattern matches the TEXT of
a command and is blind to shell semantics (`rm -fr /`, `rm  -rf /`, `eval $(echo … |
base64 -d)` all step around a deny of `rm -rf`). Containment is the sandbox's job.

Invariants: standard library only; compiled policies are immutable and safe to share.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: Most patterns per list, and longest pattern in characters: a policy is configuration,
#: and a bound keeps a request from compiling megabytes of regular expressions.
MAX_PATTERNS = 256
MAX_PATTERN_CHARS = 4096
#: Policy origins as named to the model.
AGENT = "agent"
SERVICE = "service"
_ORIGIN_TEXT = {AGENT: "the agent's command policy", SERVICE: "the tool service's command policy"}
_ALTERNATIVE = "The command did not run; do the task another way, or ask the user for help."


def _quote(pattern: str) -> str:
    """A pattern as written, in double quotes (repr would double every backslash)."""
    return f'"{pattern}"'


class PatternError(ValueError):
    """A policy pattern that is not usable.

    Attributes:
        rule: "allow" or "deny".
        index: the pattern's position in its list.
        pattern: the pattern text (cut to 200 characters).
        error: why it is not usable.
    """

    def __init__(self, rule: str, index: int, pattern: str, error: str) -> None:
        self.rule, self.index, self.pattern, self.error = rule, index, pattern[:200], error
        super().__init__(f"{rule}[{index}] pattern {_quote(self.pattern)} does not compile: {error}")


@dataclass(frozen=True)
class Refusal:
    """Why a command was refused.

    Attributes:
        origin: "agent" or "service" (whose policy), "" for undecodable arguments.
        rule: "deny" (a deny pattern matched), "allow" (no allow pattern matched),
            "invalid" (the policy has a pattern that does not compile) or "arguments"
            (the call's arguments do not decode, 004 §2.7l).
        pattern: the pattern that decided ("" for allow, where none matched).
        index: that pattern's position in its list (-1 when none).
        message: the model-facing text.
    """

    origin: str
    rule: str
    pattern: str
    index: int
    message: str

    def details(self) -> dict[str, Any]:
        """Host-side facts for a result's details (JSON-serializable)."""
        reason = "INVALID_ARGUMENTS" if self.rule == "arguments" else "POLICY_DENIED"
        out: dict[str, Any] = {"reason": reason, "rule": self.rule}
        if self.origin:
            out["policy"] = self.origin
        if self.index >= 0:
            out["pattern"], out["pattern_index"] = self.pattern, self.index
        return out


def _check_list(rule: str, patterns: Sequence[str]) -> list[re.Pattern[str]]:
    if len(patterns) > MAX_PATTERNS:
        raise PatternError(rule, MAX_PATTERNS, "", f"more than {MAX_PATTERNS} patterns")
    out = []
    for i, text in enumerate(patterns):
        if len(text) > MAX_PATTERN_CHARS:
            raise PatternError(rule, i, text, f"longer than {MAX_PATTERN_CHARS} characters")
        try:
            out.append(re.compile(text))
        except (re.error, RecursionError, OverflowError, ValueError) as exc:
            raise PatternError(rule, i, text, str(exc)) from None
    return out


def validate_patterns(allow: Sequence[str], deny: Sequence[str]) -> None:
    """Check that every pattern compiles; change nothing.

    Raises:
        PatternError: the first pattern (allow before deny, in list order) that does not
            compile, is too long, or a list longer than MAX_PATTERNS.
    """
    _check_list("allow", allow)
    _check_list("deny", deny)


@dataclass(frozen=True)
class CommandPolicy:
    """A compiled policy (see the module docstring); build it with `compile_policy`.

    Attributes:
        origin: "agent" or "service", named in refusals.
        allow: (pattern text, compiled) in list order.
        deny: (pattern text, compiled) in list order.
        broken: the first pattern that does not compile; set = every command is refused.
    """

    origin: str
    allow: tuple[tuple[str, re.Pattern[str]], ...] = ()
    deny: tuple[tuple[str, re.Pattern[str]], ...] = ()
    broken: PatternError | None = None

    @property
    def empty(self) -> bool:
        """True when the policy allows every command (no patterns, nothing broken)."""
        return not self.allow and not self.deny and self.broken is None

    def check(self, command: str) -> Refusal | None:
        """Return why command is refused, or None when the policy lets it through.

        Args:
            command: the command text exactly as the tool would run it.
        """
        whose = _ORIGIN_TEXT.get(self.origin, f"the {self.origin} command policy")
        if self.broken is not None:
            b = self.broken
            return Refusal(
                self.origin,
                "invalid",
                b.pattern,
                b.index,
                f"Command refused: {whose} has a {b.rule} pattern that does not compile "
                f"({_quote(b.pattern)}: {b.error}), so it refuses every command until it is fixed. "
                f"{_ALTERNATIVE}",
            )
        if self.allow and not any(rx.search(command) for _, rx in self.allow):
            listed = ", ".join(_quote(t) for t, _ in self.allow[:10])
            more = f" and {len(self.allow) - 10} more" if len(self.allow) > 10 else ""
            return Refusal(
                self.origin,
                "allow",
                "",
                -1,
                f"Command refused by {whose}: it matches none of the allow rules ({listed}{more}). "
                f"Only commands matching one of them may run. {_ALTERNATIVE}",
            )
        for i, (text, rx) in enumerate(self.deny):
            if rx.search(command):
                return Refusal(
                    self.origin,
                    "deny",
                    text,
                    i,
                    f"Command refused by {whose}: it matches the deny rule {_quote(text)}. {_ALTERNATIVE}",
                )
        return None


def compile_policy(allow: Sequence[str] = (), deny: Sequence[str] = (), *, origin: str) -> CommandPolicy:
    """Compile a policy; never raises.

    A pattern that does not compile yields a policy that refuses every command (fail
    closed); callers that can refuse bad input earlier use `validate_patterns`.

    Args:
        allow: patterns of which a command must match one; empty = every command.
        deny: patterns no command may match.
        origin: "agent" or "service" (named in refusals).
    """
    try:
        allowed = _check_list("allow", allow)
        denied = _check_list("deny", deny)
    except PatternError as exc:
        return CommandPolicy(origin, broken=exc)
    return CommandPolicy(
        origin, tuple(zip(allow, allowed, strict=True)), tuple(zip(deny, denied, strict=True))
    )


def check_command(command: str, policies: Iterable[CommandPolicy]) -> Refusal | None:
    """Return the first refusal among policies (each must let the command through), or None."""
    for policy in policies:
        refusal = policy.check(command)
        if refusal is not None:
            return refusal
    return None


# -- exec_command's arguments (004 §2.7l) ---------------------------------------------------

_RESEND = "Resend the call with the arguments as one JSON object."
_SENTINEL_STRINGS = ("workdir", "session_id")


def _arguments_refused(message: str) -> Refusal:
    return Refusal("", "arguments", "", -1, message)


def exec_arguments_problem(args: dict[str, Any]) -> str | None:
    """Return why exec_command cannot use decoded arguments, or None when it can.

    The rules (004 §2.7l): `cmd` is a non-empty string; `workdir` and `session_id` are
    strings or one of the zero-value sentinels null, 0, false; `timeout_ms`, when set, is
    an integer >= 1. Unknown keys are ignored.
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
    refused as a result by the tool service, so it never needs a person's approval.
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
