"""Reading model requests off the emulator's log: tool calls, their results, system text.

`check_pairing(path, body)` is the pairing validator of issue 9: in every request each tool
call has exactly one result, every result answers a call made before it in that request,
and no call is separated from its result. It understands the OpenAI Responses and Chat
Completions bodies and the Anthropic Messages body the official SDKs send.
"""

from __future__ import annotations

from typing import Any


def calls_and_results(path: str, body: Any) -> tuple[list[str], list[str]]:
    """Return (call ids, result call ids) of a request body, in request order."""
    calls: list[str] = []
    results: list[str] = []
    if path.startswith("/v1/messages"):
        for message in body.get("messages", []):
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_use":
                    calls.append(block["id"])
                elif block.get("type") == "tool_result":
                    results.append(block["tool_use_id"])
    elif "chat" in path:
        for message in body.get("messages", []):
            for call in message.get("tool_calls") or []:
                calls.append(call["id"])
            if message.get("role") == "tool":
                results.append(message["tool_call_id"])
    else:
        for item in body.get("input", []):
            if item.get("type") == "function_call":
                calls.append(item["call_id"])
            elif item.get("type") == "function_call_output":
                results.append(item["call_id"])
    return calls, results


def check_pairing(path: str, body: Any) -> None:
    """Fail unless every call of the request has exactly one result and every result a call."""
    calls, results = calls_and_results(path, body)
    assert len(set(calls)) == len(calls), f"a call appears twice: {calls}"
    assert sorted(results) == sorted(calls), f"calls {calls} vs results {results}"


def system_text(path: str, body: Any) -> str:
    """Return everything a request says in the system role (instructions included)."""
    if path.startswith("/v1/messages"):
        system = body.get("system", "")
        if isinstance(system, list):
            return "\n".join(b.get("text", "") for b in system)
        return str(system)
    parts = [str(body.get("instructions", ""))]
    for item in body.get("input", body.get("messages", [])):
        if item.get("role") in ("system", "developer"):
            content = item.get("content")
            parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts)
