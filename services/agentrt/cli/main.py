"""Entry point of the `agentrt` command (placeholder until the CLI lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command; return the exit status."""
    print("agentrt: CLI not built yet", file=sys.stderr)
    return 2
