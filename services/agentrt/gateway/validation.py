"""Request validation before any provider call (seed 002 "The Validated Model Client").

A request is rejected whole, never repaired: at most 16 MiB, at most 100,000 visited
values (content blocks, tools, and every JSON value inside tool schemas, the output
schema and recorded tool-call arguments), JSON nested at most 64 deep. Tool names match
[a-zA-Z0-9_-]{1,64} and are unique; a tool's `parameters_json_schema` is a JSON object. An
image carries exactly one of inline data (JPEG, PNG, GIF or WebP, its media type named) or
an http(s)/data URL.
Every Duration the request carries (max_queue_wait, at most a day; a tool's timeout; a
recorded result's duration) is a well-formed one (`mesh.durations`). An idempotency key
holds at most 256 characters and no control character.
Every JSON text is read strictly (`core.jsontext`): NaN, Infinity, -Infinity and a number
beyond a float's range are not JSON, so no request body the provider SDKs would refuse to
encode gets past here.
Every failure is INVALID_ARGUMENT with a stable reason and the offending field.

JSON texts that passed (tool schemas, the output schema, recorded arguments and raw blocks:
the same texts come back on every turn of a run) are remembered in a bounded cache
(`JSON_CACHE_ENTRIES` texts of at most `JSON_CACHE_MAX_CHARS` characters, least recently
used first out) with what the checks need of them, whether an object and how many values,
so they are not parsed again; only a text that passed the strict reading is cached, a text
that fails is never cached, and is refused each time.

`resolve_tenant` decides whom a call is charged to (metrics label and, with per-tenant
budgets, the limiter's bucket): the `x-agentrt-tenant` header is the caller's identity
(checked by the mesh interceptor); the body's `tenant` must obey the header's rules and may
only repeat a non-default header, never contradict it.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from agentrt.core import jsontext
from agentrt.core.errors import MeshError, Reason, invalid, missing, quote
from agentrt.mesh.context import DEFAULT_TENANT, TENANT_HEADER, valid_tenant
from agentrt.mesh.durations import check_duration, seconds_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_VALUES = 100_000
MAX_DEPTH = 64
#: The longest admission wait a request may ask for, seconds (a day).
MAX_QUEUE_WAIT_SECONDS = 86_400.0
#: Longest model-call idempotency key, in characters.
MAX_KEY_CHARS = 256
#: Passed JSON texts remembered (see the module docstring): how many, and the longest.
JSON_CACHE_ENTRIES = 1024
JSON_CACHE_MAX_CHARS = 16 * 1024
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_ROLES = frozenset(v for v in c.Role.values() if v != c.ROLE_UNSPECIFIED)
#: Inline image types every remote provider accepts (OpenAI and Anthropic alike).
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def resolve_tenant(body: str, caller: str) -> str:
    """Return the tenant a call is charged to, from the body's tenant and the caller's header.

    Args:
        body: `ModelRequest.tenant` ("" = not set).
        caller: the tenant of the `x-agentrt-tenant` header ("default" when none was sent),
            already checked by the mesh interceptor.

    Returns:
        caller when body is empty or equal to it; body when the header names no tenant
        (the caller is "default"), so a caller without the header may name its tenant in
        the body.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_ID (field "request.tenant") when body breaks the
            header's rule (1..64 of letters, digits, `_ . -`, starting with a letter or
            digit); INVALID_ARGUMENT/INVALID_VALUE when body names another tenant than a
            non-default header.
    """
    if not body:
        return caller
    if not valid_tenant(body):
        raise invalid(
            Reason.INVALID_ID,
            "request.tenant must be 1..64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            field="request.tenant",
        )
    if caller != DEFAULT_TENANT and body != caller:
        raise invalid(
            Reason.INVALID_VALUE,
            f"request.tenant {quote(body)} differs from the caller's {TENANT_HEADER} {quote(caller)}",
            field="request.tenant",
        )
    return body


def validate_request(request: g.ModelRequest) -> None:
    """Check a ModelRequest against the 002 limits and the contract's field rules.

    Raises:
        MeshError: INVALID_ARGUMENT with reason REQUEST_TOO_LARGE (bytes, values, depth;
            metadata `limit` says which), INVALID_JSON (a JSON text that is not strict JSON,
            e.g. one holding NaN, or a schema that is not a JSON object),
            MISSING_FIELD (no messages, a tool call without id or name), INVALID_VALUE
            (bad role, empty block, bad image, bad tool name, bad setting, a malformed,
            negative or over-a-day max_queue_wait), INVALID_ID (a malformed `tenant`) or
            UNKNOWN_TOOL (a named tool choice that is not among the tools).
    """
    size = request.ByteSize()
    if size > MAX_REQUEST_BYTES:
        raise invalid(
            Reason.REQUEST_TOO_LARGE,
            f"request is {size} bytes; the limit is {MAX_REQUEST_BYTES}",
            limit="bytes",
        )
    if not request.messages:
        raise missing("messages")
    if request.tenant:
        resolve_tenant(request.tenant, DEFAULT_TENANT)
    if request.HasField("max_queue_wait"):
        seconds_of(request.max_queue_wait, "max_queue_wait", max_seconds=MAX_QUEUE_WAIT_SECONDS)
    check_idempotency_key(request.idempotency_key)
    budget = _Budget()
    names = _validate_tools(request.tools, budget)
    _validate_messages(request.messages, budget)
    _validate_settings(request.settings, names, budget)


def check_idempotency_key(key: str) -> None:
    """Refuse a model-call key of more than MAX_KEY_CHARS characters or with a control character.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE (field `idempotency_key`).
    """
    if len(key) > MAX_KEY_CHARS:
        raise invalid(
            Reason.INVALID_VALUE,
            f"idempotency_key is longer than {MAX_KEY_CHARS} characters",
            field="idempotency_key",
        )
    if _CONTROL.search(key):
        raise invalid(
            Reason.INVALID_VALUE,
            f"idempotency_key {quote(key)} holds a control character",
            field="idempotency_key",
        )


class _Budget:
    """Counts visited values against MAX_VALUES."""

    def __init__(self) -> None:
        self.values = 0

    def spend(self, n: int) -> None:
        self.values += n
        if self.values > MAX_VALUES:
            raise invalid(
                Reason.REQUEST_TOO_LARGE,
                f"request holds more than {MAX_VALUES} values",
                limit="values",
            )


def parse_json_object(text: str, field: str, budget: _Budget | None = None) -> dict[str, Any]:
    """Parse text (strictly: no non-finite number) as a JSON object within the depth and value limits.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_JSON when text is not a JSON object (or holds
            NaN, Infinity, -Infinity or a number beyond a float's range);
            INVALID_ARGUMENT/REQUEST_TOO_LARGE when it nests deeper than 64 or holds
            too many values.
    """
    value = _parse(text, field)
    if not isinstance(value, dict):
        raise invalid(Reason.INVALID_JSON, f"{field} must be a JSON object", field=field)
    _measure(value, field, budget)
    return value


class _Refused(Exception):
    """A JSON text the cached check refuses (never cached: lru_cache keeps no exception)."""


@functools.lru_cache(maxsize=JSON_CACHE_ENTRIES)
def _json_shape(text: str) -> tuple[bool, int]:
    """Return (is an object, values it holds) of a JSON text within the depth limit.

    Raises:
        _Refused: not strict JSON (core.jsontext), or nested deeper than MAX_DEPTH.
    """
    try:
        value = jsontext.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Refused from exc
    counted = _Budget()
    try:
        _measure(value, "", counted)
    except MeshError as exc:  # deeper than MAX_DEPTH, or more values than any request may hold
        raise _Refused from exc
    return isinstance(value, dict), counted.values


def _check_json(text: str, field: str, budget: _Budget, want_object: bool) -> None:
    """Check a JSON text as parse_json_object (want_object) or _parse + _measure would.

    Same outcome, same errors; a text that passed before (and is not too long to remember)
    is not parsed again.
    """
    if len(text) <= JSON_CACHE_MAX_CHARS:
        try:
            is_object, values = _json_shape(text)
        except _Refused:
            pass  # the full check below raises its own, precise error
        else:
            if want_object and not is_object:
                raise invalid(Reason.INVALID_JSON, f"{field} must be a JSON object", field=field)
            budget.spend(values)
            return
    if want_object:
        parse_json_object(text, field, budget)
    else:
        _measure(_parse(text, field), field, budget)


def _parse(text: str, field: str) -> Any:
    try:
        return jsontext.loads(text)
    except RecursionError as exc:
        raise _too_deep(field) from exc
    except ValueError as exc:
        raise invalid(Reason.INVALID_JSON, f"{field} is not valid JSON: {exc}", field=field) from exc


def _too_deep(field: str) -> MeshError:
    return invalid(
        Reason.REQUEST_TOO_LARGE, f"{field} nests deeper than {MAX_DEPTH}", field=field, limit="depth"
    )


def _measure(value: Any, field: str, budget: _Budget | None) -> None:
    """Walk value iteratively (no recursion limit), counting values and checking depth."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise _too_deep(field)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        if budget is not None and count >= 1024:
            budget.spend(count)
            count = 0
    if budget is not None:
        budget.spend(count)


def _validate_tools(tools: Any, budget: _Budget) -> set[str]:
    names: set[str] = set()
    for i, spec in enumerate(tools):
        field = f"tools[{i}]"
        budget.spend(1)
        if not _TOOL_NAME.match(spec.name):
            raise invalid(Reason.INVALID_VALUE, f"{field}.name must match [a-zA-Z0-9_-]{{1,64}}", field=field)
        if spec.name in names:
            raise invalid(Reason.INVALID_VALUE, f"tool {spec.name!r} is declared twice", field=field)
        names.add(spec.name)
        if spec.HasField("timeout"):
            check_duration(spec.timeout, f"{field}.timeout")
        if spec.parameters_json_schema:
            _check_json(spec.parameters_json_schema, f"{field}.parameters_json_schema", budget, True)
    return names


def _validate_messages(messages: Any, budget: _Budget) -> None:
    for i, message in enumerate(messages):
        field = f"messages[{i}]"
        if message.role not in _ROLES:
            raise invalid(
                Reason.INVALID_VALUE, f"{field}.role must be system, user or assistant", field=field
            )
        for j, block in enumerate(message.content):
            budget.spend(1)
            _validate_block(block, f"{field}.content[{j}]", budget)


def _validate_block(block: c.ContentBlock, field: str, budget: _Budget) -> None:
    kind = block.WhichOneof("block")
    if kind is None:
        raise invalid(Reason.INVALID_VALUE, f"{field} has no block set", field=field)
    if kind == "tool_use":
        call = block.tool_use
        if not call.call_id:
            raise missing(f"{field}.tool_use.call_id")
        if not call.name:
            raise missing(f"{field}.tool_use.name")
        if call.arguments:
            _check_json(call.arguments, f"{field}.tool_use.arguments", budget, False)
    elif kind == "tool_result":
        if not block.tool_result.call_id:
            raise missing(f"{field}.tool_result.call_id")
        if block.tool_result.HasField("duration"):
            check_duration(block.tool_result.duration, f"{field}.tool_result.duration")
    elif kind == "image":
        _validate_image(block.image, f"{field}.image")
    elif kind == "raw" and block.raw.json:
        _check_json(block.raw.json, f"{field}.raw.json", budget, False)


def _validate_image(image: c.ImageBlock, field: str) -> None:
    if bool(image.data) == bool(image.url):
        raise invalid(Reason.INVALID_VALUE, f"{field} needs exactly one of data or url", field=field)
    if image.data and image.media_type not in IMAGE_MEDIA_TYPES:
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.media_type must be one of {', '.join(IMAGE_MEDIA_TYPES)} for inline data",
            field=f"{field}.media_type",
        )
    if image.url and not (
        image.url.startswith(("https://", "http://"))
        or any(image.url.startswith(f"data:{t};base64,") for t in IMAGE_MEDIA_TYPES)
    ):
        raise invalid(
            Reason.INVALID_VALUE,
            f"{field}.url must be an http(s) URL or a base64 data URL of a supported image type",
            field=f"{field}.url",
        )


def _validate_settings(settings: c.ModelSettings, names: set[str], budget: _Budget) -> None:
    if settings.HasField("temperature") and not 0.0 <= settings.temperature <= 2.0:
        raise invalid(
            Reason.INVALID_VALUE, "settings.temperature must be within [0, 2]", field="settings.temperature"
        )
    if settings.HasField("top_p") and not 0.0 < settings.top_p <= 1.0:
        raise invalid(Reason.INVALID_VALUE, "settings.top_p must be within (0, 1]", field="settings.top_p")
    if settings.HasField("max_output_tokens") and settings.max_output_tokens <= 0:
        raise invalid(
            Reason.INVALID_VALUE,
            "settings.max_output_tokens must be positive",
            field="settings.max_output_tokens",
        )
    if settings.output_json_schema:
        _check_json(settings.output_json_schema, "settings.output_json_schema", budget, True)
    choice = settings.tool_choice
    if choice.mode == c.TOOL_CHOICE_MODE_NAMED and choice.name not in names:
        raise invalid(
            Reason.UNKNOWN_TOOL,
            f"tool_choice names {quote(choice.name)}, which is not among the tools",
            field="settings.tool_choice.name",
        )
    if choice.mode == c.TOOL_CHOICE_MODE_REQUIRED and not names:
        raise invalid(
            Reason.INVALID_VALUE, "tool_choice REQUIRED needs at least one tool", field="settings.tool_choice"
        )
