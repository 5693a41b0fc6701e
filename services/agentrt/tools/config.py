"""ToolService configuration: the only place its environment is read (004 §2.14).

Invariants: `sandbox` is "bwrap" (the default: every command under bubblewrap, refused when
isolation is unavailable) or "unconfined" (the explicit opt-in to run commands without
namespaces; printed loudly at startup). Nothing falls back to unconfined by itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, env
from agentrt.mesh.db import sqlite_url

SANDBOX_BWRAP = "bwrap"
SANDBOX_UNCONFINED = "unconfined"
SANDBOX_MODES = (SANDBOX_BWRAP, SANDBOX_UNCONFINED)


@dataclass(frozen=True)
class CommandLimits:
    """Resource limits of one sandboxed command (each a per-process rlimit).

    Attributes:
        cpu_seconds: RLIMIT_CPU, CPU seconds.
        memory_bytes: RLIMIT_AS, bytes of address space.
        file_size_bytes: RLIMIT_FSIZE, largest file a command may write, bytes.
        open_files: RLIMIT_NOFILE, open descriptors.
        tmp_bytes: size of the private /tmp tmpfs, bytes.
    """

    cpu_seconds: int = 300
    memory_bytes: int = 4 * 1024**3
    file_size_bytes: int = 1024**3
    open_files: int = 1024
    tmp_bytes: int = 512 * 1024**2


@dataclass(frozen=True)
class ToolsConfig:
    """How the tool service listens, where workspaces live, and how commands are confined.

    Attributes:
        server: listening and state settings (db_url "" means SQLite in the state dir).
        workspace_root: directory of the workspaces the service creates; "" means
            `<state_dir>/workspaces`.
        sandbox: "bwrap" or "unconfined" (see the module docstring).
        default_timeout_seconds: exec_command's timeout when neither the call nor the
            request sets one, seconds.
        max_timeout_seconds: the longest timeout a model's `timeout_ms` may ask for, seconds.
        max_output_bytes: output kept per call when the request sets no cap, bytes (head and
            tail are kept, the middle dropped with a marker).
        max_progress_bytes: output streamed as progress per call before progress is
            suppressed (the result still carries the capped output), bytes.
        limits: default rlimits of a command.
        sandbox_uid: uid commands run as when the service runs as root (never root itself).
        sandbox_gid: gid paired with sandbox_uid.
        heartbeat_seconds: how often a running call refreshes its journal record; a STARTED
            record not refreshed for three periods belongs to a dead process, seconds.
        bwrap_path: the bubblewrap executable (a name looked up on PATH, or a path).
    """

    server: ServerConfig = field(default_factory=ServerConfig)
    workspace_root: str = ""
    sandbox: str = SANDBOX_BWRAP
    default_timeout_seconds: float = 60.0
    max_timeout_seconds: float = 600.0
    max_output_bytes: int = 64 * 1024
    max_progress_bytes: int = 1024 * 1024
    limits: CommandLimits = field(default_factory=CommandLimits)
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    heartbeat_seconds: float = 5.0
    bwrap_path: str = "bwrap"

    def __post_init__(self) -> None:
        """Validate values that would otherwise fail deep inside a call.

        Raises:
            ValueError: an unknown sandbox mode, or a non-positive limit.
        """
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be one of {SANDBOX_MODES}, not {self.sandbox!r}")
        if self.default_timeout_seconds <= 0 or self.max_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_output_bytes < 256:
            raise ValueError("max_output_bytes must be at least 256")
        if self.sandbox_uid == 0:
            raise ValueError("sandbox_uid must not be root")

    @property
    def resolved_workspace_root(self) -> str:
        """Absolute workspace root (`<state_dir>/workspaces` when unset)."""
        return os.path.abspath(self.workspace_root or os.path.join(self.server.state_dir, "workspaces"))

    @property
    def db_url(self) -> str:
        """The journal's database URL (SQLite `<state_dir>/tools.db` when unset)."""
        return self.server.db_url or sqlite_url(self.server.state_dir, "tools")

    @classmethod
    def from_env(
        cls, port: int | None = None, db_url: str | None = None, sandbox: str | None = None
    ) -> ToolsConfig:
        """Build from flags, falling back to the environment.

        Variables: AGENTRT_TOOLS_PORT, AGENTRT_TOOLS_DB,
        AGENTRT_WORKSPACE_ROOT, AGENTRT_SANDBOX (bwrap|unconfined), AGENTRT_TOOLS_TIMEOUT_SECONDS,
        AGENTRT_TOOLS_MAX_OUTPUT_BYTES, AGENTRT_STATE_DIR, AGENTRT_AUTH_TOKEN, AGENTRT_HOST.

        Raises:
            ValueError: a variable holds a value of the wrong kind.
        """
        state_dir = env("STATE_DIR", ".agentrt")
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("TOOLS_PORT", str(DEFAULT_PORTS["tools"]))),
                db_url=db_url or env("TOOLS_DB", sqlite_url(state_dir, "tools")),
                auth_token=env("AUTH_TOKEN", ""),
                state_dir=state_dir,
            ),
            workspace_root=env("WORKSPACE_ROOT", ""),
            sandbox=sandbox or env("SANDBOX", SANDBOX_BWRAP),
            default_timeout_seconds=float(env("TOOLS_TIMEOUT_SECONDS", "60")),
            max_output_bytes=int(env("TOOLS_MAX_OUTPUT_BYTES", str(64 * 1024))),
        )
