r"""exec_command's command policy: allow/deny regular expressions (004 §2.7j, §2.7l).

Shared by the run loop (which checks a call before its approval gate) and the tool service
(which refuses the command as a result). Both decide through this module, so a call the
run loop lets skip approval is a call the tool service refuses.

Semantics of one `CommandPolicy`:
- Patterns are Python `re` syntax, searched anywhere in the command text (`search`).
- When any allow pattern is given, a command must match one of them.
- Deny is checked after allow, so a deny always wins.
- A policy with no patterns allows everything.
- A policy whose patterns do not compile refuses every command, naming the bad pattern:
  falling open would turn a typo into no protection at all, silently.
- A refusal names the rule (which policy, allow or deny, which pattern), so the model can
  ask for something else instead of trying variations.

Matching runs under a time budget (the model writes the command text, and a backtracking
pattern such as `(a|a)+$` takes time exponential in it): one command's check, across every
pattern of every policy applied, may take `CHECK_BUDGET_SECONDS` of CPU time. A check that
runs out FAILS CLOSED: the command is refused (rule "timeout"), naming the pattern being
evaluated when the budget ran out. The whole command text is inspected, never a prefix:
a cut would let padding push a denied command past the part a pattern sees.

The engine is the `regex` package in its re-compatible VERSION0 mode, because Python `re`
cannot be interrupted. Patterns are compiled by `regex` only: `re`'s compiler is Python code
that takes seconds on a long case-insensitive pattern of wide sets (an event loop stalled
while it ran), `regex`'s is C and milliseconds. The accepted syntax is therefore VERSION0's:
re's, plus a few extensions of `regex` (e.g. `\p{...}` classes). The patterns of one policy
total at most MAX_POLICY_CHARS characters, which bounds compiling too, and compiled policies
are cached by their text. Decisions on the two engines' known differences:
- A POSIX class inside a set (`[[:alpha:]]`) is refused: re reads it as a set of the
  characters `[:alph` (and warns), `regex` as the class, so the one text would mean two things.
- Unicode definitions differ for non-ASCII text: `\w`/`\b` follow Unicode's word
  characters (combining marks are word characters, `²` is not), `\s` leaves out
  U+001C..U+001F, and a few case-insensitive foldings (dotted I) differ. ASCII text
  matches as under re.

It is a filter on approval noise, NOT a security boundary: a pattern matches the TEXT of
a command and is blind to shell semantics (`rm -fr /`, `rm  -rf /`, `eval $(echo … |
base64 -d)` all step around a deny of `rm -rf`). Containment is the sandbox's job.

Invariants: standard library plus `regex`; compiled policies are immutable and safe to share.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import regex

#: Most patterns per list, and longest pattern in characters: a policy is configuration,
#: and a bound keeps a request from compiling megabytes of regular expressions.
MAX_PATTERNS = 256
MAX_PATTERN_CHARS = 4096
#: Most characters of all the patterns of one policy (allow and deny together).
MAX_POLICY_CHARS = 16384
#: CPU seconds one command's check may take, across every pattern of every policy applied
#: (the tool service: its own policy and the request's together). Ordinary patterns take
#: microseconds; the bound keeps a backtracking pattern from holding an event loop.
CHECK_BUDGET_SECONDS = 0.05
#: Policy origins as named to the model.
AGENT = "agent"
SERVICE = "service"
#: The rule of a refusal whose check ran out of time.
TIMEOUT = "timeout"
_ORIGIN_TEXT = {AGENT: "the agent's command policy", SERVICE: "the tool service's command policy"}
_ALTERNATIVE = "The command did not run; do the task another way, or ask the user for help."
# An unescaped "[:name:]" (regex reads it as a POSIX class inside a set, re as characters).
_POSIX_CLASS = re.compile(r"(?<!\\)(?:\\\\)*\[:\^?[^\[\]:]+:\]")


class _Compiled(Protocol):
    """The part of a compiled `regex` pattern the policy uses (the package has no stubs)."""

    def search(self, string: str, *, timeout: float) -> object | None: ...


def _quote(pattern: str) -> str:
    """A pattern as written, in double quotes (repr would double every backslash)."""
    return f'"{pattern}"'


class PatternError(ValueError):
    """A policy pattern, or a pattern list, that is not usable.

    The text reads `deny[3] pattern "x(" does not compile: <why>` for one pattern, and
    `deny: <why>` for the list as a whole (more than MAX_PATTERNS patterns).

    Attributes:
        rule: "allow" or "deny".
        index: the pattern's position in its list; -1 when the list as a whole is at fault.
        pattern: the pattern text (cut to 200 characters); "" when index is -1.
        error: why it is not usable.
    """

    def __init__(
        self, rule: str, index: int, pattern: str, error: str, *, verb: str = "does not compile"
    ) -> None:
        self.rule, self.index, self.pattern, self.error = rule, index, pattern[:200], error
        if index < 0:
            super().__init__(f"{rule}: {error}")
        else:
            super().__init__(f"{rule}[{index}] pattern {_quote(self.pattern)} {verb}: {error}")

    @property
    def field(self) -> str:
        """Where the problem is: "deny[3]" for one pattern, "deny" for the whole list."""
        return self.rule if self.index < 0 else f"{self.rule}[{self.index}]"


@dataclass(frozen=True)
class Refusal:
    """Why a command was refused.

    Attributes:
        origin: "agent" or "service" (whose policy), "" for undecodable arguments.
        rule: "deny" (a deny pattern matched), "allow" (no allow pattern matched),
            "invalid" (the policy has a pattern that is not usable), "timeout" (the check
            ran out of its time budget) or "arguments" (the call's arguments do not
            decode, 004 §2.7l).
        pattern: the pattern that decided ("" for allow, where none matched).
        index: that pattern's position in its list (-1 when none).
        message: the model-facing text.
        pattern_list: "allow" or "deny", the list `index` points into ("" when none).
    """

    origin: str
    rule: str
    pattern: str
    index: int
    message: str
    pattern_list: str = ""

    @property
    def definite(self) -> bool:
        """True when the same command is refused by the same policies however busy the machine.

        Every refusal but a timeout: whether a check finishes inside its budget depends on
        the load of the process running it, so the run loop's approval gate does not take a
        timeout as proof that the tool service will refuse too (it asks; the tool service
        then decides, failing closed).
        """
        return self.rule != TIMEOUT

    def details(self) -> dict[str, Any]:
        """Host-side facts for a result's details (JSON-serializable)."""
        reason = "INVALID_ARGUMENTS" if self.rule == "arguments" else "POLICY_DENIED"
        out: dict[str, Any] = {"reason": reason, "rule": self.rule}
        if self.origin:
            out["policy"] = self.origin
        if self.index >= 0:
            out["pattern"], out["pattern_index"] = self.pattern, self.index
            out["pattern_list"] = self.pattern_list
        return out


def _compile(rule: str, index: int, text: str) -> _Compiled:
    """Compile one pattern with `regex` in VERSION0 (see the module docstring)."""
    if len(text) > MAX_PATTERN_CHARS:
        raise PatternError(
            rule, index, text, f"longer than {MAX_PATTERN_CHARS} characters", verb="is not usable"
        )
    posix = _POSIX_CLASS.search(text)
    if posix is not None:
        name = posix.group().lstrip("\\")
        raise PatternError(
            rule,
            index,
            text,
            f"{name} is a POSIX class, which Python re reads as a set of "
            "its characters; write the class out (e.g. [a-zA-Z], \\d, \\s) or escape the bracket (\\[)",
            verb="is not usable",
        )
    try:
        compiled: _Compiled = regex.compile(text, regex.V0)
    except (regex.error, RecursionError, OverflowError, ValueError) as exc:
        raise PatternError(rule, index, text, str(exc)) from None
    return compiled


def _check_list(rule: str, patterns: Sequence[str]) -> list[_Compiled]:
    if len(patterns) > MAX_PATTERNS:
        raise PatternError(rule, -1, "", f"{len(patterns)} patterns, more than the limit of {MAX_PATTERNS}")
    return [_compile(rule, i, text) for i, text in enumerate(patterns)]


def _check_total(allow: Sequence[str], deny: Sequence[str]) -> None:
    total = sum(len(p) for p in allow) + sum(len(p) for p in deny)
    if total > MAX_POLICY_CHARS:
        rule = "deny" if deny else "allow"
        raise PatternError(
            rule,
            -1,
            "",
            f"the policy's patterns total {total} characters, more than the limit of {MAX_POLICY_CHARS}",
        )


def validate_patterns(allow: Sequence[str], deny: Sequence[str]) -> None:
    """Check that every pattern compiles; change nothing.

    Raises:
        PatternError: the first pattern (allow before deny, in list order) that does not
            compile, is too long or uses a POSIX class; or a list longer than MAX_PATTERNS
            (index -1).
    """
    _check_total(allow, deny)
    _check_list("allow", allow)
    _check_list("deny", deny)


def _search(rx: _Compiled, command: str, deadline: float) -> bool | None:
    """Whether rx matches anywhere in command; None when the budget ran out first.

    `deadline` is on the `time.process_time()` clock, the CPU-time clock `regex` measures
    its own timeout on, so a process that is merely descheduled does not spend it.
    """
    left = deadline - time.process_time()
    if left <= 0:
        return None
    try:
        return rx.search(command, timeout=left) is not None
    except TimeoutError:
        return None


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
    allow: tuple[tuple[str, _Compiled], ...] = ()
    deny: tuple[tuple[str, _Compiled], ...] = ()
    broken: PatternError | None = None

    @property
    def empty(self) -> bool:
        """True when the policy allows every command (no patterns, nothing broken)."""
        return not self.allow and not self.deny and self.broken is None

    def check(
        self, command: str, *, deadline: float | None = None, budget: float = CHECK_BUDGET_SECONDS
    ) -> Refusal | None:
        """Return why command is refused, or None when the policy lets it through.

        Args:
            command: the command text exactly as the tool would run it; searched whole.
            deadline: when the check's time runs out, on the `time.process_time()` clock
                (seconds); None = `budget` from now. `check_command` shares one deadline
                among the policies it applies.
            budget: the budget the deadline was set from, in seconds (named in a refusal).

        Returns:
            None, or a Refusal with rule "invalid", "allow", "deny" or "timeout" (the budget
            ran out while a pattern was evaluated, or before it could be: fail closed).
        """
        if deadline is None:
            deadline = time.process_time() + budget
        whose = _ORIGIN_TEXT.get(self.origin, f"the {self.origin} command policy")
        if self.broken is not None:
            b = self.broken
            return Refusal(
                self.origin,
                "invalid",
                b.pattern,
                b.index,
                f"Command refused: {whose} is not usable ({b}), so it refuses every command until "
                f"it is fixed. {_ALTERNATIVE}",
                b.rule if b.index >= 0 else "",
            )
        if self.allow:
            for i, (text, rx) in enumerate(self.allow):
                found = _search(rx, command, deadline)
                if found is None:
                    return self._too_slow(whose, "allow", i, text, budget)
                if found:
                    break
            else:
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
            found = _search(rx, command, deadline)
            if found is None:
                return self._too_slow(whose, "deny", i, text, budget)
            if found:
                return Refusal(
                    self.origin,
                    "deny",
                    text,
                    i,
                    f"Command refused by {whose}: it matches the deny rule {_quote(text)}. {_ALTERNATIVE}",
                    "deny",
                )
        return None

    def _too_slow(self, whose: str, rule: str, index: int, text: str, budget: float) -> Refusal:
        """The fail-closed refusal of a check that ran out of time at pattern `index`."""
        return Refusal(
            self.origin,
            TIMEOUT,
            text,
            index,
            f"Command refused by {whose}: its {rule} pattern {_quote(text)} took too long to evaluate "
            f"against this command (a command's check may take {budget * 1000:g} ms), and a command "
            f"that cannot be checked is not run. Whoever configured the policy should simplify that "
            f"pattern. {_ALTERNATIVE}",
            rule,
        )


def compile_policy(allow: Sequence[str] = (), deny: Sequence[str] = (), *, origin: str) -> CommandPolicy:
    """Compile a policy (cached by its text: policies are immutable); never raises.

    A pattern that is not usable yields a policy that refuses every command (fail
    closed); callers that can refuse bad input earlier use `validate_patterns`.

    Args:
        allow: patterns of which a command must match one; empty = every command.
        deny: patterns no command may match.
        origin: "agent" or "service" (named in refusals).
    """
    return _compile_policy(tuple(allow), tuple(deny), origin)


@functools.lru_cache(maxsize=256)
def _compile_policy(allow: tuple[str, ...], deny: tuple[str, ...], origin: str) -> CommandPolicy:
    try:
        _check_total(allow, deny)
        allowed = _check_list("allow", allow)
        denied = _check_list("deny", deny)
    except PatternError as exc:
        return CommandPolicy(origin, broken=exc)
    return CommandPolicy(
        origin, tuple(zip(allow, allowed, strict=True)), tuple(zip(deny, denied, strict=True))
    )


def check_command(
    command: str, policies: Iterable[CommandPolicy], *, budget: float = CHECK_BUDGET_SECONDS
) -> Refusal | None:
    """Return the first refusal among policies (each must let the command through), or None.

    Args:
        command: the command text.
        policies: applied in order.
        budget: CPU seconds the whole check may take, shared by every policy; running out
            refuses the command (rule "timeout", fail closed).
    """
    deadline = time.process_time() + budget
    for policy in policies:
        refusal = policy.check(command, deadline=deadline, budget=budget)
        if refusal is not None:
            return refusal
    return None
