"""Progressive tool disclosure: deferred tools wait until a result names them (004 §2.7i).

A tool marked deferred (ToolSpec.deferred, or AgentTool.deferred) is withheld from the
model until some tool result's `added_tools` names it. `Disclosure` is the run's state:

- cumulative for the rest of the run: a disclosed tool is never withdrawn (that would look,
  from the model's side, like a tool taken away mid-conversation);
- names that are not deferred tools of the agent are ignored (a tool cannot fail a run by
  mentioning something), and so are repeats;
- it round-trips whole through `to_json` / `from_json`, so a resumed or taken-over run
  offers the same tools (004 §2.1: the serialized state is the contract). The loop keeps
  it in the run log with the save point that consumed the disclosing result.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

#: Most names one result may disclose (ToolResult.added_tools).
MAX_ADDED = 64
#: The serialized form's version.
VERSION = 1


@dataclass(frozen=True)
class Disclosure:
    """The deferred tools disclosed so far, in order of disclosure."""

    names: tuple[str, ...] = ()

    def offered(self, tools: Sequence[tuple[str, bool]]) -> list[str]:
        """Return the names the model is offered, in the agent's tool order.

        Args:
            tools: (name, deferred) of every tool of the turn's agent, in order.
        """
        shown = set(self.names)
        return [name for name, deferred in tools if not deferred or name in shown]

    def disclose(self, added: Iterable[str], deferred: Collection[str]) -> tuple[Disclosure, tuple[str, ...]]:
        """Return the state after a result named `added`, and the newly disclosed names.

        Args:
            added: ToolResult.added_tools of one result, in its order.
            deferred: the names of the agent's deferred tools (others are ignored).
        """
        known = set(self.names)
        new: list[str] = []
        for name in added:
            if name in deferred and name not in known:
                known.add(name)
                new.append(name)
        if not new:
            return self, ()
        return Disclosure(self.names + tuple(new)), tuple(new)

    def to_json(self) -> str:
        """Return the state as a JSON object string (for the run log)."""
        return json.dumps({"version": VERSION, "disclosed": list(self.names)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Disclosure:
        """Read a state written by `to_json` ("" = nothing disclosed).

        Raises:
            ValueError: text that is not such a record (a corrupted log is not silently
                taken as "nothing disclosed", which would hide tools mid-conversation).
        """
        if not text:
            return cls()
        value = json.loads(text)
        if not isinstance(value, dict) or value.get("version") != VERSION:
            raise ValueError(f"not a disclosure record of version {VERSION}: {text[:100]!r}")
        names = value.get("disclosed")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"a disclosure record's names must be a list of strings: {text[:100]!r}")
        return cls(tuple(dict.fromkeys(names)))
