"""JSON Schemas through jsonschema: meta-schema checks, compiled validators, their problems.

The runs-side half of 004 §2.7h (the pure half is `agentrt.core.tool_args`):

- `check_schema(text, field)` is what RegisterAgent and StartRun run on every schema a
  spec carries (output schemas, client tools' parameters, handoff input schemas): the text
  must be a JSON object and a valid schema under its meta-schema (`$schema`, else draft
  2020-12), or the request is refused with the schema error and where it is.
- `validator(text)` compiles a schema once per schema text (an LRU cache shared by every
  run of the process) and returns a `core.tool_args.Validate`: the value's problems, each
  with its JSON pointer, in document order. A schema that cannot be compiled (not a valid
  schema, or a `$ref` that does not resolve) yields None and validation is skipped (004
  §2.7h: it may still be one the provider understands).

Invariants: no network, ever: references resolve only inside the schema and against the
bundled meta-schemas (an empty `referencing.Registry`, so jsonschema's remote retrieval is
never reached). Validators are immutable and safe to share between runs and threads.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.validators import validator_for

from agentrt.core import jsontext
from agentrt.core.errors import Reason, invalid
from agentrt.core.tool_args import SchemaProblem, Validate, json_pointer

#: Distinct schema texts whose compiled validators are kept.
CACHE_SIZE = 512
#: Problems reported per value (the first ones in document order).
MAX_REPORTED = 20


def parse_schema(text: str, field: str) -> dict[str, Any]:
    """Return a schema text decoded as a JSON object.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_JSON (metadata field) when the text is not JSON
            or not an object.
    """
    try:
        value = jsontext.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid(Reason.INVALID_JSON, f"{field} is not valid JSON: {exc}", field=field) from None
    if not isinstance(value, dict):
        raise invalid(Reason.INVALID_JSON, f"{field} must be a JSON object", field=field)
    return value


def check_schema(text: str, field: str) -> dict[str, Any]:
    """Check a schema text against its meta-schema; return it decoded.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_JSON for text that is not a JSON object;
            INVALID_ARGUMENT/INVALID_SCHEMA (metadata field, schema_pointer = where in the
            schema) naming the meta-schema's first error.
    """
    schema = parse_schema(text, field)
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        pointer = json_pointer(exc.absolute_path)
        where = f" at {pointer}" if pointer else ""
        raise invalid(
            Reason.INVALID_SCHEMA,
            f"{field} is not a valid JSON Schema{where}: {exc.message[:500]}",
            field=field,
            schema_pointer=pointer,
        ) from None
    except (referencing.exceptions.Unresolvable, RecursionError) as exc:
        raise invalid(
            Reason.INVALID_SCHEMA,
            f"{field} is not a usable JSON Schema: {exc}",
            field=field,
            schema_pointer="",
        ) from None
    return schema


def is_object_schema(schema: Mapping[str, Any]) -> bool:
    """True when a schema's root describes an object (type "object" or properties given)."""
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in schema


class _Compiled:
    """One compiled schema: `__call__` is a `core.tool_args.Validate`."""

    def __init__(self, validator: Any) -> None:
        self._validator = validator

    def __call__(self, value: Any) -> Sequence[SchemaProblem]:
        try:
            errors = sorted(self._validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
        except (referencing.exceptions.Unresolvable, RecursionError):
            # A reference that does not resolve: the schema cannot be compiled here, so the
            # value is not judged by it (004 §2.7h).
            return ()
        return tuple(SchemaProblem(json_pointer(e.absolute_path), e.message) for e in errors[:MAX_REPORTED])


@functools.lru_cache(maxsize=CACHE_SIZE)
def decoded(text: str) -> dict[str, Any] | None:
    """Return a schema text decoded once per distinct text (None: not a JSON object).

    The result is shared: callers read it, never change it (core.tool_args copies defaults).
    """
    try:
        value = jsontext.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def validator(text: str) -> Validate | None:
    """Return the compiled validator of a schema text, or None when it cannot be compiled.

    Compiled once per distinct text (CACHE_SIZE kept); "" and non-object texts are None.
    """
    return _validator(text) if text else None


@functools.lru_cache(maxsize=CACHE_SIZE)
def _validator(text: str) -> Validate | None:
    try:
        schema = jsontext.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(schema, dict):
        return None
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except (jsonschema.SchemaError, referencing.exceptions.Unresolvable, RecursionError):
        return None
    return _Compiled(cls(schema, registry=referencing.Registry()))
