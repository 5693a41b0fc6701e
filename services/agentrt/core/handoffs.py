"""Handoffs: a function call the run loop intercepts (004 §2.4, §2.2 step 8, §2.7h).

A handoff is offered to the model as a tool (`Target.tool_name`). When a response calls
one, the loop asks `resolve()` how to split the response:

- every regular call runs first, as usual (tools in the same response have executed
  before the agent switches);
- the FIRST handoff call in call order wins; each further handoff call is answered with
  `ignored_text` (a function call never goes without an output);
- the winning call is answered with `acknowledgement(target)`: the marker
  `{"assistant": "<target>"}` and a plain-language identity line, so a weaker target model
  does not mistake the transfer for a call it made itself;
- the turn ends there; the next turn belongs to the target (the loop resolves its
  snapshot fresh), and max_turns keeps counting.

The handoff's input is checked by `check_input` (an object; "" and "null" read as {};
a schema's root `required` rejects absent input; then the whole schema, through the
caller's validator). Unlike a tool's, a rejected handoff input fails the run (kind
`KIND_INVALID_INPUT`); schema defaults are not applied.

`filter_history` applies a target's input filter to the rendered history: it rewrites
only the part from before the handoff (the first `cut` items), which is what the target
sees; the session keeps the unfiltered conversation, and what follows the handoff is
shown whole.

Pure: no I/O; history items are `core.render.UserTurn` / `Step`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentrt.core.decide import Call
from agentrt.core.render import Step, UserTurn
from agentrt.core.tool_args import SchemaProblem, Validate

#: The failure kind of a handoff whose input was rejected.
KIND_INVALID_INPUT = "invalid_handoff_input"
#: The key of the acknowledgement marker (004 §2.4).
MARKER_KEY = "assistant"
#: Longest tool name a provider accepts.
MAX_TOOL_NAME = 64
#: The message of absent input when the schema requires properties (004 §2.7h).
NON_NULL_TEXT = "Handoff function expected non-null input, but got None"
_NOT_TOOL_CHAR = re.compile(r"[^a-zA-Z0-9_-]")

History = list[UserTurn | Step]


@dataclass(frozen=True)
class InputFilter:
    """What a target sees of the conversation before the handoff (HandoffInputFilter).

    Attributes:
        drop_tool_calls: leave out earlier steps that called tools (except the handoff call).
        keep_last_turns: keep only the last N model steps before the handoff; 0 = all.
    """

    drop_tool_calls: bool = False
    keep_last_turns: int = 0

    @property
    def identity(self) -> bool:
        """True when the filter changes nothing."""
        return not self.drop_tool_calls and self.keep_last_turns <= 0


@dataclass(frozen=True)
class Target:
    """One handoff an agent offers.

    Attributes:
        tool_name: the function name the model calls.
        agent_name: the registered target agent.
        agent_version: the target's version; 0 = the latest at the handoff.
        description: what the model reads about the tool.
        input_schema: the decoded schema of the arguments; None = no arguments.
        input_filter: what the target sees; None = everything.
    """

    tool_name: str
    agent_name: str
    agent_version: int = 0
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    input_filter: InputFilter | None = None


def default_tool_name(agent_name: str) -> str:
    """Return "transfer_to_<agent_name>" with characters tools cannot carry as "_", cut to 64."""
    return ("transfer_to_" + _NOT_TOOL_CHAR.sub("_", agent_name))[:MAX_TOOL_NAME]


def default_description(agent_name: str) -> str:
    """Return the default description of a handoff tool."""
    return f"Hand the conversation over to the agent {agent_name}."


def tool_parameters(target: Target) -> dict[str, Any]:
    """Return the parameters schema the model is offered for a handoff (an object schema)."""
    if target.input_schema is not None:
        return dict(target.input_schema)
    return {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class Resolution:
    """How a response's calls split around handoffs (004 §2.2 step 8).

    Attributes:
        regular: the calls that are not handoffs, in call order; they run first.
        handoff: the winning handoff call (the first in call order); None = no handoff.
        target: the winning call's target; None = no handoff.
        ignored: further handoff calls, in call order, each answered with `ignored_text`.
    """

    regular: tuple[Call, ...]
    handoff: Call | None = None
    target: Target | None = None
    ignored: tuple[Call, ...] = ()


def resolve(calls: Sequence[Call], targets: Mapping[str, Target]) -> Resolution:
    """Split a response's calls into regular calls, the winning handoff and ignored ones.

    Args:
        calls: the decision's calls in call order.
        targets: the turn's handoffs by tool name.

    Returns:
        The resolution; `handoff` is None when no call names a handoff tool.
    """
    regular = [c for c in calls if c.name not in targets]
    offs = [c for c in calls if c.name in targets]
    if not offs:
        return Resolution(tuple(regular))
    return Resolution(tuple(regular), offs[0], targets[offs[0].name], tuple(offs[1:]))


def acknowledgement(target_name: str) -> str:
    """Return the result the target reads for the transfer call (004 §2.4, decisions §5.40).

    Two lines: the marker `{"assistant": "<target>"}`, then who the reader is now.
    """
    marker = json.dumps({MARKER_KEY: target_name}, ensure_ascii=False)
    return (
        f"{marker}\nThe conversation has been handed over to you: you are now the agent "
        f"{target_name}. Continue it yourself from here."
    )


def ignored_text(winner: str) -> str:
    """Return the result of a handoff call that lost to an earlier one in the same response."""
    return (
        f"This handoff was not performed: only the first handoff of a reply is, and the "
        f"conversation goes to {winner}."
    )


class HandoffInputError(ValueError):
    """A handoff's input is not acceptable; the run fails (kind KIND_INVALID_INPUT).

    Attributes:
        pointer: JSON pointer of the offending value ("" = the whole input).
        error: what is wrong.
    """

    def __init__(self, pointer: str, error: str) -> None:
        self.pointer, self.error = pointer, error
        where = f" at {pointer}" if pointer else ""
        super().__init__(f"handoff input{where}: {error}")


def check_input(
    arguments: str, schema: Mapping[str, Any] | None, validate: Validate | None
) -> dict[str, Any]:
    """Return a handoff call's input decoded, or raise why it is refused (004 §2.7h).

    Rules that need no compiled schema, and so survive one that cannot be compiled:
    the input is a JSON object; "" and "null" read as {}, refused with NON_NULL_TEXT when
    the schema's root requires properties. Then the whole schema through `validate`
    (None = skipped). Defaults are not applied: the session and the events keep the
    model's raw argument string.

    Raises:
        HandoffInputError: the first problem, with its JSON pointer.
    """
    text = arguments.strip()
    if text in ("", "null"):
        required = schema.get("required") if schema is not None else None
        if isinstance(required, list) and required:
            raise HandoffInputError("", NON_NULL_TEXT)
        value: Any = {}
    else:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise HandoffInputError("", f"not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise HandoffInputError("", f"must be a JSON object, not {type(value).__name__}")
    if validate is not None:
        problems: Sequence[SchemaProblem] = validate(value)
        if problems:
            raise HandoffInputError(problems[0].pointer, problems[0].message)
    return value


def filter_history(
    history: Sequence[UserTurn | Step], cut: int, f: InputFilter, handoff_call_id: str
) -> History:
    """Return what a handoff's target sees: the first `cut` items filtered, the rest as they are.

    Args:
        history: the rendered history of the session (core.render items), opening with a
            UserTurn.
        cut: how many leading items were written before the handoff, the handoff's own
            step included (0..len(history)); the wiring counts them from the session seq
            the handoff turn was persisted at, so it survives resume and takeover.
        f: the target's input filter.
        handoff_call_id: the winning handoff call; its step is kept with that call alone
            (and its acknowledgement) when tool calls are dropped.

    Returns:
        A new list that still opens with a UserTurn (the user input that opened what was
        kept), so it renders.
    """
    cut = max(0, min(cut, len(history)))
    before, after = list(history[:cut]), list(history[cut:])
    if f.identity or not before:
        return before + after
    if f.drop_tool_calls:
        kept = (_without_tools(item, handoff_call_id) for item in before)
        before = [item for item in kept if item is not None]
    if f.keep_last_turns > 0:
        before = _last_turns(before, f.keep_last_turns)
    return before + after


def _without_tools(item: UserTurn | Step, handoff_call_id: str) -> UserTurn | Step | None:
    if isinstance(item, UserTurn) or not item.calls:
        return item
    kept = tuple(c for c in item.calls if c.call_id == handoff_call_id)
    if not kept:
        return None
    observations = {k: v for k, v in item.observations.items() if k == handoff_call_id}
    return replace(item, calls=kept, observations=observations)


def _last_turns(items: History, n: int) -> History:
    steps = [i for i, item in enumerate(items) if isinstance(item, Step)]
    if len(steps) <= n:
        return items
    first = steps[-n]
    opening = next((i for i in range(first - 1, -1, -1) if isinstance(items[i], UserTurn)), None)
    return ([items[opening]] if opening is not None else []) + items[first:]
