"""The local model's prompt, output contract and answer parsing (pure; no llama.cpp here).

SmolLM2-Instruct speaks ChatML (`<|im_start|>role ... <|im_end|>`). The system turn holds
the request's instructions, the tool list and the output contract; the conversation
follows, with the model's own earlier turns written the way it is asked to answer:
`{"tool": NAME, "arguments": {...}}` for a tool call and `{"answer": ...}` for a final
answer. Tool results come back as user turns naming the tool.

`output_schema` is the JSON schema the llama.cpp grammar enforces: one branch per allowed
tool (its name as a constant, its own parameter schema for the arguments) and, unless
tool choice forbids it, the answer branch. Strings, arrays and extra keys are bounded in
the grammar's copy of each schema so a constrained answer always closes within the token
cap; the arguments sent to tools are the exact text the model produced.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agentrt.gateway.providers import canonical as cn
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

#: Longest string the grammar lets the model write, in characters (GBNF repetition bound).
STRING_MAX_CHARS = 600
_OPEN, _CLOSE = "<|im_start|>", "<|im_end|>"


def allowed_tools(request: g.ModelRequest) -> list[c.ToolSpec]:
    """Return the tools the model may call under the request's tool choice."""
    choice = request.settings.tool_choice
    if choice.mode == c.TOOL_CHOICE_MODE_NONE:
        return []
    if choice.mode == c.TOOL_CHOICE_MODE_NAMED:
        return [t for t in request.tools if t.name == choice.name]
    return list(request.tools)


def answer_allowed(request: g.ModelRequest) -> bool:
    """Return False when tool choice demands a tool call."""
    mode = request.settings.tool_choice.mode
    return mode not in (c.TOOL_CHOICE_MODE_REQUIRED, c.TOOL_CHOICE_MODE_NAMED) or not request.tools


def bounded(schema: Any) -> Any:
    """Return the grammar's copy of a JSON schema: no extra object keys, no length bounds.

    Extra keys are a way a constrained reply could grow without end; strings are bounded
    in the grammar itself (gbnf()). The tool still validates its real schema.
    """
    out = copy.deepcopy(schema)
    stack = [out]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        # Bounds the converter unrolls into rule trees llama.cpp refuses; the grammar's own
        # string bound stands in for them.
        for key in ("maxLength", "minLength", "maxItems", "minItems", "pattern"):
            node.pop(key, None)
        for key in ("properties", "$defs", "definitions"):
            if isinstance(node.get(key), dict):
                stack.extend(node[key].values())
        for key in ("items", "additionalProperties", "not"):
            if isinstance(node.get(key), dict):
                stack.append(node[key])
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            if isinstance(node.get(key), list):
                stack.extend(node[key])
    return out


#: Arguments schema used when a tool's own schema cannot be turned into a grammar.
FALLBACK_ARGUMENTS = {"type": "object", "additionalProperties": {"type": "string"}}


def output_schema(request: g.ModelRequest, fallback: bool = False) -> dict[str, Any]:
    """Return the schema of one reply: a tool call among the allowed tools, or an answer.

    Args:
        request: the validated request.
        fallback: use FALLBACK_ARGUMENTS for every tool (when a tool schema defeats the
            grammar converter).
    """
    branches: list[dict[str, Any]] = []
    for tool in allowed_tools(request):
        arguments = FALLBACK_ARGUMENTS if fallback else bounded(cn.tool_schema(tool))
        if arguments.get("type") != "object":
            arguments = {**arguments, "type": "object"}
        branches.append(
            {
                "type": "object",
                "properties": {"tool": {"const": tool.name}, "arguments": arguments},
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
        )
    if answer_allowed(request) or not branches:
        answer: dict[str, Any] = {"type": "string"}
        if request.settings.output_json_schema:
            answer = bounded(json.loads(request.settings.output_json_schema))
        branches.append(
            {
                "type": "object",
                "properties": {"answer": answer},
                "required": ["answer"],
                "additionalProperties": False,
            }
        )
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def gbnf(schema: dict[str, Any]) -> str:
    """Return the GBNF grammar of a reply schema.

    Built by llama.cpp's own converter with "tool" ahead of "arguments" (the model names
    the tool before writing its arguments), then with two rules tightened: a string holds
    at most STRING_MAX_CHARS characters, and no raw control characters (so the text the
    model writes is always valid JSON).

    Raises:
        Exception: the converter cannot express the schema.
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    text = json_schema_to_gbnf(json.dumps(schema), prop_order=["tool", "arguments", "answer"])
    text = text.replace(
        'string ::= "\\"" char* "\\"" space', f'string ::= "\\"" char{{0,{STRING_MAX_CHARS}}} "\\"" space'
    )
    return text.replace('char ::= [^"\\\\]', 'char ::= [^"\\\\\\x7F\\x00-\\x1F]')


def _describe(tool: c.ToolSpec) -> str:
    schema = cn.tool_schema(tool)
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields = ", ".join(
        f'"{name}": {(spec or {}).get("type", "value")}{"" if name in required else " (optional)"}'
        for name, spec in props.items()
    )
    line = f"- {tool.name}: {tool.description or 'no description'}"
    return f"{line} Arguments: {{{fields}}}"


def system_text(request: g.ModelRequest) -> str:
    """Return the system turn: instructions, tools and the reply contract."""
    parts = [request.system.strip() or "You are a helpful assistant that completes tasks."]
    parts.extend(cn.joined_text(m.content) for m in request.messages if m.role == c.ROLE_SYSTEM)
    tools = allowed_tools(request)
    if tools:
        parts.append("You can use these tools:\n" + "\n".join(_describe(t) for t in tools))
    contract = ["Reply with exactly one JSON object and nothing else:"]
    if tools:
        contract.append('{"tool": "<tool name>", "arguments": {...}} to call one tool, or')
    contract.append('{"answer": "<your final answer>"} when the task is done.')
    parts.append("\n".join(contract))
    return "\n\n".join(p for p in parts if p)


def _turn(role: str, text: str) -> str:
    return f"{_OPEN}{role}\n{text}{_CLOSE}\n"


def _user_text(message: c.Message) -> str:
    pieces: list[str] = []
    for block in message.content:
        kind = block.WhichOneof("block")
        if kind == "text":
            pieces.append(block.text.text)
        elif kind == "tool_result":
            r = block.tool_result
            verb = "failed" if r.is_error else "returned"
            pieces.append(f"Tool {r.name or r.call_id} {verb}:\n{r.content}")
        elif kind == "image":
            pieces.append("[an image the local model cannot see]")
    return "\n\n".join(pieces)


def _assistant_text(message: c.Message) -> str:
    calls = [b.tool_use for b in message.content if b.WhichOneof("block") == "tool_use"]
    if calls:
        return "\n".join(f'{{"tool": {json.dumps(t.name)}, "arguments": {cn.render_args(t)}}}' for t in calls)
    return json.dumps({"answer": cn.joined_text(message.content)})


def prompt(request: g.ModelRequest) -> str:
    """Return the whole ChatML prompt, ending with the opened assistant turn."""
    out = [_turn("system", system_text(request))]
    for message in request.messages:
        if message.role == c.ROLE_USER:
            out.append(_turn("user", _user_text(message)))
        elif message.role == c.ROLE_ASSISTANT:
            out.append(_turn("assistant", _assistant_text(message)))
    out.append(f"{_OPEN}assistant\n")
    return "".join(out)
