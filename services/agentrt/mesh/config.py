"""The configuration every service shares, read at the process edge (004 §2.14).

`ServerConfig` is a frozen dataclass passed down to a service's build_server; library
code never reads the environment. `env()` is the one reader of `AGENTRT_*` variables and
is only called from config modules and the CLI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_REQUEST_BYTES = 16 * 1024 * 1024

#: Default ports of the five services on a laptop (`agentrt up`).
DEFAULT_PORTS = {"runs": 50051, "gateway": 50052, "tools": 50053, "sessions": 50054, "tasks": 50055}


def env(name: str, default: str = "") -> str:
    """Return the environment variable AGENTRT_<name>, or default when unset or empty."""
    value = os.environ.get(f"AGENTRT_{name}", "")
    return value if value else default


@dataclass(frozen=True)
class ServerConfig:
    """How one service process listens and where it keeps state.

    Attributes:
        host: interface to bind, e.g. "127.0.0.1".
        port: TCP port; 0 picks a free one.
        db_url: SQLAlchemy async URL, e.g. "sqlite+aiosqlite:///.agentrt/sessions.db".
        auth_token: bearer token callers must send; "" disables auth.
        max_request_bytes: largest request accepted, in bytes (16 MiB).
        grace_seconds: how long in-flight calls get to finish on SIGTERM, in seconds.
        state_dir: directory for local state (SQLite files, workspaces).
    """

    host: str = "127.0.0.1"
    port: int = 0
    db_url: str = ""
    auth_token: str = ""
    max_request_bytes: int = MAX_REQUEST_BYTES
    grace_seconds: float = 5.0
    state_dir: str = ".agentrt"

    @property
    def address(self) -> str:
        """Return "host:port" as configured."""
        return f"{self.host}:{self.port}"
