"""Agents as tools: the tool's contract and the attribution of a child run (004 §2.8, §2.7f, §2.7h).

An AgentTool naming a registered agent is a tool to the model: it takes `{"input": string}`
(`PARAMETERS`), validated like any tool's arguments before the child run starts; the input
becomes the child run's input (`child_input`). The child run has its own run id and its
own hidden session; its final output comes back as the call's result (`child_result`).

Usage (`RunUsage`): a run's total is everything it spent, its nested part what was spent
off its conversation. Folding a child (`fold_child`) adds the child's total to both the
parent's total and its nested part; a tool's own model calls (ToolResult.nested_usage) and
a model guardrail's verdict count the same way (`add_nested`). The run's own model calls
count in the total only (`add_own`). Nested tokens are kept apart because they were spent
on a different conversation: counted as context they would make this one look larger than
anything ever sent; they are part of the bill all the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

#: The parameters of every agent tool.
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
    "required": ["input"],
    "additionalProperties": False,
}


def default_description(agent_name: str) -> str:
    """Return the description of an agent tool that declares none."""
    return f"Ask the agent {agent_name} and get its final answer."


class ChildInputError(ValueError):
    """An agent tool's arguments do not give a usable input (fed back to the calling model)."""


def child_input(arguments: str) -> str:
    """Return the child run's input from an agent tool call's arguments.

    Raises:
        ChildInputError: not a JSON object with a non-blank string "input".
    """
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        raise ChildInputError("the arguments are not valid JSON") from None
    text = value.get("input") if isinstance(value, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ChildInputError('"input" is required: the non-empty text to ask the agent')
    return text


def child_result(status: str, final_output: str, failure_message: str = "") -> tuple[str, bool]:
    """Return (content, is_error) of an agent tool's result from its child run's ending.

    Args:
        status: "completed", "failed" or "canceled".
        final_output: the child's final output (completed).
        failure_message: the child's user-safe failure message (failed).
    """
    if status == "completed":
        return final_output, False
    if status == "canceled":
        return "The agent's run was canceled before it answered.", True
    return f"The agent's run failed: {failure_message or 'no reason given'}", True


@dataclass(frozen=True)
class Tokens:
    """Token counts (the shape of the proto Usage), in tokens; `requests` in model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_dict(self) -> dict[str, int]:
        """Return the counts by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Tokens:
        """Read counts written by `to_dict` (absent fields are 0).

        Raises:
            ValueError: a count that is not a non-negative integer.
        """
        out = {}
        for f in fields(cls):
            n = value.get(f.name, 0)
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"usage {f.name} must be a non-negative integer, not {n!r}")
            out[f.name] = n
        return cls(**out)


@dataclass(frozen=True)
class RunUsage:
    """A run's usage: `total` (everything, nested included) and its `nested` part."""

    total: Tokens = Tokens()
    nested: Tokens = Tokens()

    def add_own(self, usage: Tokens) -> RunUsage:
        """Count one of the run's own model calls (context-bearing; total only)."""
        return RunUsage(self.total + usage, self.nested)

    def add_nested(self, usage: Tokens) -> RunUsage:
        """Count tokens spent off the conversation (a tool's own calls, a model guardrail)."""
        return RunUsage(self.total + usage, self.nested + usage)

    def fold_child(self, child: RunUsage) -> RunUsage:
        """Fold a finished child run: its whole total joins the parent's total and nested part."""
        return self.add_nested(child.total)

    def to_dict(self) -> dict[str, dict[str, int]]:
        """Return {"total": ..., "nested": ...} for the run log."""
        return {"total": self.total.to_dict(), "nested": self.nested.to_dict()}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> RunUsage:
        """Read a record written by `to_dict`.

        Raises:
            ValueError: a malformed record.
        """
        total, nested = value.get("total", {}), value.get("nested", {})
        if not isinstance(total, dict) or not isinstance(nested, dict):
            raise ValueError("a usage record holds two objects, total and nested")
        return cls(Tokens.from_dict(total), Tokens.from_dict(nested))
