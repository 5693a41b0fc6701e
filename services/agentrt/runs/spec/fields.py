"""What the checks of a spec share: the name patterns and the error of a bad field.

Used by validation.py, guardrails.py, agents.py and admission.py, so a name is held to one
pattern wherever it is checked.
"""

from __future__ import annotations

import re

from agentrt.core.errors import MeshError, Reason, invalid

#: An agent's name (also a guardrail's): letters, digits, "_", "." and "-", 1 to 64.
AGENT_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}\Z")
#: A tool's name (also a handoff's tool name): letters, digits, "_" and "-", 1 to 64.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")


def bad(message: str, field: str, reason: Reason = Reason.INVALID_VALUE, **meta: str) -> MeshError:
    """Return the INVALID_ARGUMENT error of a field (reason INVALID_VALUE unless given).

    Args:
        message: what is wrong, naming the field.
        field: the field's path in the request, put in the metadata as `field`.
        reason: the ErrorInfo reason.
        **meta: more metadata (e.g. `pattern`).
    """
    return invalid(reason, message, field=field, **meta)
