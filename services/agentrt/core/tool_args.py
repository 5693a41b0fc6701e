"""Tool-call arguments against the tool's JSON Schema, and how many calls run at once.

Schema validation (004 §2.7h) is split in two rooms, because `core/` is standard library
only and jsonschema is not:

- `agentrt.runs.spec.schemas` compiles a schema once per schema text (jsonschema, no network)
  and reports its errors as `SchemaProblem`s, each with the JSON pointer of the offending
  value. It hands this module a `Validate` function.
- This module decides what a call becomes: `check_arguments` validates the WHOLE value
  (nested required, types, enums, bounds) through that function, then applies the schema's
  defaults; `problems_text` is the model-facing refusal, so the model can correct its own
  call. A schema that cannot be compiled comes as `validate=None`: validation is skipped
  (it may still be one the provider understands), defaults still apply.

Invariants:
- The exact argument string the model produced is what travels, unless a default was
  actually added: then (and only then) the value is re-serialized, keys in their original
  order with the added ones after, so the same call always yields the same string.
- Validation reads the model's value as sent; defaults are applied after it, so a missing
  required property is reported even when its schema declares a default.
- `additionalProperties` is not special-cased: the validator enforces what the schema says.

Also here: `batch_concurrency` (004 §2.2 "0 = unlimited", §2.7d: one sequential tool
serializes the whole batch).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Problems named in one refusal; the rest are counted.
MAX_PROBLEMS = 5
#: Cap on one problem's message in the refusal, in characters.
PROBLEM_CHARS = 300


@dataclass(frozen=True)
class SchemaProblem:
    """One way a value fails its schema.

    Attributes:
        pointer: RFC 6901 JSON pointer of the offending value inside the instance ("" =
            the whole value).
        message: what is wrong, as the validator says it.
    """

    pointer: str
    message: str

    def describe(self) -> str:
        """Return "at /a/b: message" (the root reads "at the top level")."""
        where = f"at {self.pointer}" if self.pointer else "at the top level"
        return f"{where}: {self.message[:PROBLEM_CHARS]}"


#: Validates a decoded value; returns its problems in a stable order (none = valid).
Validate = Callable[[Any], Sequence[SchemaProblem]]


def json_pointer(path: Iterable[str | int]) -> str:
    """Return the RFC 6901 pointer of a path of keys and indexes ("" for the root).

    `~` is written `~0` and `/` is written `~1`, so every key round-trips.
    """
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


@dataclass(frozen=True)
class ArgumentCheck:
    """The outcome of checking one call's arguments.

    Attributes:
        arguments: the argument string to send: the model's exact text, or the value with
            its defaults applied when any was added ("" stays "" when nothing was added).
        problems: why the value fails its schema, in order; empty = the call may run.
        defaults_applied: True when `arguments` was re-serialized to add defaults.
    """

    arguments: str
    problems: tuple[SchemaProblem, ...] = ()
    defaults_applied: bool = False

    @property
    def ok(self) -> bool:
        """True when the call may run."""
        return not self.problems


def check_arguments(
    arguments: str, schema: Mapping[str, Any] | None, validate: Validate | None
) -> ArgumentCheck:
    """Validate a call's argument text against its tool's schema; apply the defaults (004 §2.7h).

    Args:
        arguments: the exact text the model produced for a call whose arguments are a JSON
            object or empty ("" is read as {}); text that is not a JSON object is refused
            earlier (core.decide keeps it out of band) but is reported here too.
        schema: the tool's parameters schema as a decoded object; None = no schema.
        validate: the compiled validator of that schema; None = validation is skipped.

    Returns:
        The check; `arguments` keeps the exact text unless a default was added.
    """
    text = arguments if arguments.strip() else ""
    try:
        value: Any = json.loads(text) if text else {}
    except (ValueError, RecursionError) as exc:
        return ArgumentCheck(arguments, (SchemaProblem("", f"the arguments are not valid JSON ({exc})"),))
    if not isinstance(value, dict):
        return ArgumentCheck(arguments, (SchemaProblem("", "the arguments must be a JSON object"),))
    if validate is not None:
        problems = tuple(validate(value))
        if problems:
            return ArgumentCheck(arguments, problems)
    if schema is None:
        return ArgumentCheck(arguments)
    filled = apply_defaults(schema, value)
    if filled == value and _same_keys(filled, value):
        return ArgumentCheck(arguments)
    return ArgumentCheck(json.dumps(filled, ensure_ascii=False), defaults_applied=True)


def _same_keys(a: Any, b: Any) -> bool:
    """True when nested dicts have the same keys (== ignores a default equal to nothing added)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_keys(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_keys(x, y) for x, y in zip(a, b, strict=True))
    return True


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Return value with the schema's `default`s filled in; value itself is never modified.

    Walks `properties` of object schemas (recursively into present values) and `items`
    of array schemas. A property that is absent and declares a `default` gets a copy of
    it. Composition keywords (`anyOf`, `oneOf`, `allOf`, `$ref`) are not followed: which
    branch a value takes is ambiguous, and a default invented from the wrong one would be
    a value nobody asked for.
    """
    if isinstance(value, dict):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return value
        out = dict(value)
        for name, sub in properties.items():
            if not isinstance(sub, Mapping):
                continue
            if name in out:
                out[name] = apply_defaults(sub, out[name])
            elif "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        return out
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [apply_defaults(items, v) for v in value]
    return value


def problems_text(tool: str, problems: Sequence[SchemaProblem]) -> str:
    """Return the tool result that refuses a call whose arguments fail the schema.

    Names at most MAX_PROBLEMS problems, each with its JSON pointer, and counts the rest;
    ends by asking for a corrected call. The tool did not run.
    """
    shown = [f"- {p.describe()}" for p in problems[:MAX_PROBLEMS]]
    more = len(problems) - len(shown)
    if more > 0:
        shown.append(f"- and {more} more problem(s)")
    return (
        f"The arguments of this {tool} call do not match the tool's parameter schema, so the tool "
        "did not run:\n" + "\n".join(shown) + "\nSend the call again with arguments that match the schema."
    )


def batch_concurrency(cap: int, runnable: int, *, any_sequential: bool) -> int:
    """Return how many of a batch's calls may execute at once (004 §2.2, §2.7d).

    Args:
        cap: AgentLimits.max_tool_concurrency; 0 = unlimited.
        runnable: calls of the batch that go to a tool (>= 0).
        any_sequential: one of them is a sequential tool: the whole batch runs serially.

    Returns:
        A semaphore size, at least 1.
    """
    if any_sequential:
        return 1
    if cap <= 0:
        return max(1, runnable)
    return max(1, min(cap, runnable))
