"""What each provider's models accept, decided before the call (seed 002 "Provider Capability Differences").

The adapters ask this module instead of sending what a model would reject:

- Sampling: OpenAI reasoning models (the o-series and GPT-5, not `gpt-5-chat`) reject
  `temperature` and `top_p`; current-generation Claude models (Opus 4.7 and later, Sonnet 5
  and later, Haiku 5 and later, Fable, Mythos) reject them too. For those models the values
  are omitted; older models keep receiving them. Model ids are matched anywhere in the id,
  so hosted variants ("anthropic.claude-opus-4-7-v1:0", "openai/o3") are recognized.
- OpenAI reasoning models on Chat Completions take `max_completion_tokens`, not
  `max_tokens`; on the Responses API (`store: false`) they are asked for
  `reasoning.encrypted_content`, so their reasoning items can be replayed statelessly.
- Structured output on OpenAI uses strict schema projection (`strict_output_schema`):
  every object closed and every property required. The projection only narrows: an optional
  property is accepted when its schema admits null (the model then answers null for
  "absent") and refused otherwise, since making it nullable would widen the schema; `oneOf`
  becomes `anyOf` only when its branches cannot overlap (otherwise it is refused); at most
  5,000 properties, 1,000 enum values, 10 object levels and 120,000 characters of property
  names, definition names, enum and const values.
- Structured output on Anthropic closes every object (`closed_output_schema`).
- For both, an object that declares no properties means "any object", which closing would
  shrink to `{}`: it is refused unless it says `additionalProperties: false` itself.

A schema the projection cannot express is INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY with the
field `settings.output_json_schema`; nothing is sent (`unsupported`).
"""

from __future__ import annotations

import re
from typing import Any

from agentrt.core.errors import Reason, Status
from agentrt.gateway.errors import ProviderError
from agentrt.v1 import common_pb2 as c

_OPENAI_REASONING = re.compile(r"(?:^|[/:.])(?:o\d+(?:-[a-z0-9-]+)?|gpt-5(?!-chat)[a-z0-9.-]*)$")
_CLAUDE = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2})(?!\d))?")
#: (family, first version that rejects sampling parameters).
_CLAUDE_NO_SAMPLING = {"opus": (4, 7), "sonnet": (5, 0), "haiku": (5, 0)}
_CLAUDE_NAMED_NO_SAMPLING = ("claude-fable", "claude-mythos")

MAX_STRICT_PROPERTIES = 5_000
MAX_STRICT_ENUM_VALUES = 1_000
MAX_STRICT_OBJECT_DEPTH = 10
MAX_STRICT_CHARS = 120_000
_FIELD = "settings.output_json_schema"


def openai_reasoning_model(model: str) -> bool:
    """Return True for an OpenAI reasoning model id (o1, o3-mini, o4-mini, gpt-5, gpt-5.1-codex, ...)."""
    return bool(_OPENAI_REASONING.search(model.lower().split("@")[0]))


def anthropic_rejects_sampling(model: str) -> bool:
    """Return True for a Claude model that rejects temperature and top_p (see the module docstring)."""
    name = model.lower()
    if any(marker in name for marker in _CLAUDE_NAMED_NO_SAMPLING):
        return True
    match = _CLAUDE.search(name)
    if match is None:
        return False
    family, major, minor = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    return (major, minor) >= _CLAUDE_NO_SAMPLING[family]


def sampling(settings: c.ModelSettings, *, accepted: bool) -> dict[str, float]:
    """Return the request's temperature and top_p as request fields, or {} when the model rejects them."""
    if not accepted:
        return {}
    out: dict[str, float] = {}
    if settings.HasField("temperature"):
        out["temperature"] = settings.temperature
    if settings.HasField("top_p"):
        out["top_p"] = settings.top_p
    return out


def unsupported(message: str, field: str = _FIELD) -> ProviderError:
    """Return INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for what the adapter will not send.

    A (non-retryable) ProviderError rather than a plain MeshError because adapters refuse
    inside the provider call, after the limiter's reservation: the gateway settles the
    reservation of a ProviderError (nothing was sent, nothing is charged).
    """
    return ProviderError(
        Status.INVALID_ARGUMENT, Reason.UNSUPPORTED_CAPABILITY, message, {"field": field}, retryable=False
    )


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {str(k) for k in kind}
    return None


def _values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _disjoint_values(a: dict[str, Any], b: dict[str, Any]) -> bool:
    va, vb = _values(a), _values(b)
    return va is not None and vb is not None and not any(x == y for x in va for y in vb)


def _disjoint(a: Any, b: Any) -> bool:
    """Return True when no value can match both schemas (by type, const/enum, or a required tag)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    ta, tb = _types(a), _types(b)
    if ta is not None and tb is not None and not (ta & tb or {"integer", "number"} <= ta | tb):
        return True
    if _disjoint_values(a, b):
        return True
    pa, pb = a.get("properties") or {}, b.get("properties") or {}
    shared = set(a.get("required") or []) & set(b.get("required") or [])
    return any(_disjoint_values(pa.get(n) or {}, pb.get(n) or {}) for n in shared)


class _StrictProjection:
    """One walk of a schema onto OpenAI's strict subset, counting against its limits."""

    def __init__(self) -> None:
        self.properties = 0
        self.enum_values = 0
        self.chars = 0

    def node(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict):
            if isinstance(schema, bool):
                raise unsupported("OpenAI strict structured output cannot express a boolean schema")
            return schema
        out = dict(schema)
        if "oneOf" in out:
            branches = out.pop("oneOf")
            if "anyOf" in out or not isinstance(branches, list):
                raise unsupported("oneOf together with anyOf cannot be projected for OpenAI")
            for i, left in enumerate(branches):
                if not all(_disjoint(left, right) for right in branches[i + 1 :]):
                    raise unsupported("oneOf branches overlap; OpenAI's anyOf would widen them")
            out["anyOf"] = branches
        for key in ("anyOf", "allOf"):
            if isinstance(out.get(key), list):
                out[key] = [self.node(b, depth) for b in out[key]]
        for key in ("$defs", "definitions"):
            if isinstance(out.get(key), dict):
                self.chars += sum(len(name) for name in out[key])
                out[key] = {name: self.node(sub, depth) for name, sub in out[key].items()}
        if isinstance(out.get("items"), dict):
            out["items"] = self.node(out["items"], depth)
        values = _values(out)
        if values is not None:
            self.enum_values += len(values) if "enum" in out else 0
            self.chars += sum(len(str(v)) for v in values)
        types = _types(out)
        if "properties" in out or (types is not None and "object" in types):
            out = self._object(out, depth + 1)
        self._check()
        return out

    def _object(self, out: dict[str, Any], depth: int) -> dict[str, Any]:
        if depth > MAX_STRICT_OBJECT_DEPTH:
            raise unsupported(
                f"OpenAI strict structured output nests at most {MAX_STRICT_OBJECT_DEPTH} objects"
            )
        if out.get("additionalProperties", False) is not False or _free_form(out):
            raise unsupported("OpenAI strict structured output cannot express an open object")
        properties = out.get("properties") or {}
        required = set(out.get("required") or [])
        projected: dict[str, Any] = {}
        for name, sub in properties.items():
            self.properties += 1
            self.chars += len(name)
            if name not in required and not _admits_null(sub):
                # Strict mode requires every property; making an optional one nullable would
                # let the model answer null where the caller's schema forbids it (a widening,
                # and a final answer the run loop would then reject).
                raise unsupported(
                    f"property {name!r} is optional; OpenAI strict structured output requires "
                    "every property: make it required (allowing null if it may be absent)"
                )
            projected[name] = self.node(sub, depth)
        out.update(properties=projected, required=list(properties), additionalProperties=False)
        return out

    def _check(self) -> None:
        if self.properties > MAX_STRICT_PROPERTIES:
            raise unsupported(
                f"OpenAI strict structured output allows at most {MAX_STRICT_PROPERTIES} properties"
            )
        if self.enum_values > MAX_STRICT_ENUM_VALUES:
            raise unsupported(
                f"OpenAI strict structured output allows at most {MAX_STRICT_ENUM_VALUES} enum values"
            )
        if self.chars > MAX_STRICT_CHARS:
            raise unsupported(
                f"OpenAI strict structured output allows at most {MAX_STRICT_CHARS} characters "
                "of names and values"
            )


def _free_form(schema: dict[str, Any]) -> bool:
    """Return True for an object with no properties that does not close itself (any object)."""
    return not schema.get("properties") and schema.get("additionalProperties") is not False


def _admits_null(schema: Any) -> bool:
    """Return True when schema plainly accepts null (its type, enum, const or an anyOf branch)."""
    if not isinstance(schema, dict):
        return schema is True
    kinds = _types(schema)
    values = _values(schema)
    if values is not None:
        return None in values
    if kinds is not None and "null" in kinds:
        return True
    return any(_admits_null(b) for b in schema.get("anyOf") or [])


def strict_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Project schema onto OpenAI's strict structured-output subset (see the module docstring).

    Args:
        schema: the request's output schema, a JSON object already within the 002 limits.

    Returns:
        A new schema; schema is not modified.

    Raises:
        ProviderError: INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY when the root is not an object,
            an object is open, oneOf branches overlap, or a strict limit is passed.
    """
    types = _types(schema)
    if "properties" not in schema and (types is None or "object" not in types):
        raise unsupported("OpenAI structured output needs an object schema at the root")
    result = _StrictProjection().node(schema, 0)
    assert isinstance(result, dict)
    return result


def closed_output_schema(schema: Any) -> Any:
    """Return schema with every object closed (`additionalProperties: false`), as Anthropic requires.

    Raises:
        ProviderError: INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for an object that allows
            additional properties.
    """
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_output_schema(sub) for name, sub in out[key].items()}
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [closed_output_schema(sub) for sub in out[key]]
    if isinstance(out.get("items"), dict):
        out["items"] = closed_output_schema(out["items"])
    types = _types(out)
    if "properties" in out or (types is not None and "object" in types):
        if out.get("additionalProperties", False) is not False or _free_form(out):
            raise unsupported("Anthropic structured output cannot express an open object")
        out["additionalProperties"] = False
    return out
