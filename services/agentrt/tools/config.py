"""ToolService configuration: the only place its environment is read (004 §2.14).

Invariants: `sandbox` is "bwrap" (the default: every command under bubblewrap, refused when
isolation is unavailable) or "unconfined" (the explicit opt-in to run commands without
namespaces; printed loudly at startup). Nothing falls back to unconfined by itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, edge_from_env, env
from agentrt.mesh.storage.db import sqlite_url

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
        processes: RLIMIT_NPROC, processes and threads of the command's uid. Under bwrap
            it is set inside the sandbox's user namespace, so it counts that sandbox's
            own processes only (a one-shot command's, or a named shell's with its
            background jobs); unconfined it counts every process of the uid on the host.
            Config only (`AGENTRT_TOOLS_MAX_PROCESSES`): a sandbox's limits cannot set it.
    """

    cpu_seconds: int = 300
    memory_bytes: int = 4 * 1024**3
    file_size_bytes: int = 1024**3
    open_files: int = 1024
    tmp_bytes: int = 512 * 1024**2
    processes: int = 512


@dataclass(frozen=True)
class DockerSettings:
    """The docker sandbox backend (docs/services/tools.md, "The docker backend").

    Attributes:
        image: image of a docker sandbox that names none (scripts/docker-sandbox-image.sh
            builds the default).
        host: the engine's address ("unix:///var/run/docker.sock", "tcp://h:2375"); "" means
            DOCKER_HOST, else the local socket.
        owner: value of the `agentrt.owner` label on the containers this service creates; a
            container holding a sandbox's name without it is never touched.
        cpus: CPUs a container may use (0 = no limit).
        pids_limit: processes a container may hold (0 = no limit).
        api_timeout_seconds: bound of one engine API call, seconds.
    """

    image: str = "agentrt-sandbox:1"
    host: str = ""
    owner: str = "agentrt-tools"
    cpus: float = 2.0
    pids_limit: int = 1024
    api_timeout_seconds: float = 60.0


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
        shells: persistent named shells for exec_command (004 §2.7k); when off, the
            schema has no `session_id` and one sent anyway is decoded and ignored.
        max_shells: the most named shells open at once in this service.
        max_shells_per_tenant: the most named shells one tenant may hold open at once.
        shell_idle_seconds: a named shell unused this long is closed, seconds.
        docker: the docker backend's engine, default image and container limits.
        policy_allow: the service's own exec_command allow patterns (004 §2.7j); a
            request's `command_policy` applies on top. A pattern that does not compile
            refuses every command (logged loudly at startup).
        policy_deny: the service's own deny patterns.
        max_archive_bytes: largest archive UploadWorkspace accepts, bytes (as sent,
            compressed or not); also the most file content it unpacks.
        tasks_address: "host:port" of TaskService, which the task tools (spawn_task,
            task_status, task_retry, task_stop) call; "" leaves them refusing every call.
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
    shells: bool = True
    max_shells: int = 32
    max_shells_per_tenant: int = 8
    shell_idle_seconds: float = 600.0
    docker: DockerSettings = field(default_factory=DockerSettings)
    policy_allow: tuple[str, ...] = ()
    policy_deny: tuple[str, ...] = ()
    max_archive_bytes: int = 256 * 1024**2
    tasks_address: str = f"127.0.0.1:{DEFAULT_PORTS['tasks']}"

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
        if self.max_shells < 1 or self.max_shells_per_tenant < 1 or self.shell_idle_seconds <= 0:
            raise ValueError("max_shells, max_shells_per_tenant and shell_idle_seconds must be positive")
        if self.limits.processes < 1:
            raise ValueError("limits.processes must be positive")
        if self.max_archive_bytes <= 0:
            raise ValueError("max_archive_bytes must be positive")

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
        cls,
        port: int | None = None,
        db_url: str | None = None,
        sandbox: str | None = None,
        tasks: str | None = None,
    ) -> ToolsConfig:
        """Build from flags, falling back to the environment.

        Variables: AGENTRT_TOOLS_PORT, AGENTRT_TOOLS_DB,
        AGENTRT_WORKSPACE_ROOT, AGENTRT_SANDBOX (bwrap|unconfined), AGENTRT_TOOLS_TIMEOUT_SECONDS,
        AGENTRT_TOOLS_MAX_OUTPUT_BYTES, AGENTRT_STATE_DIR, AGENTRT_HOST, `edge_from_env`'s settings,
        AGENTRT_TOOLS_POLICY_ALLOW and AGENTRT_TOOLS_POLICY_DENY (JSON arrays of patterns),
        AGENTRT_TOOLS_MAX_ARCHIVE_BYTES, AGENTRT_TOOLS_DOCKER_IMAGE, AGENTRT_TOOLS_DOCKER_HOST
        (else DOCKER_HOST), AGENTRT_TOOLS_DOCKER_OWNER.
        Shells: AGENTRT_TOOLS_SHELLS (1|0), AGENTRT_TOOLS_MAX_SHELLS,
        AGENTRT_TOOLS_MAX_SHELLS_PER_TENANT, AGENTRT_TOOLS_SHELL_IDLE_SECONDS.
        AGENTRT_TOOLS_MAX_PROCESSES: RLIMIT_NPROC of a command (`CommandLimits.processes`).
        AGENTRT_TASKS_ADDR (or `tasks`, the --tasks-addr flag): TaskService, for the task tools.

        Raises:
            ValueError: a variable holds a value of the wrong kind.
        """
        state_dir = env("STATE_DIR", ".agentrt")
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("TOOLS_PORT", str(DEFAULT_PORTS["tools"]))),
                db_url=db_url or env("TOOLS_DB", sqlite_url(state_dir, "tools")),
                **edge_from_env("tools"),
                state_dir=state_dir,
            ),
            workspace_root=env("WORKSPACE_ROOT", ""),
            sandbox=sandbox or env("SANDBOX", SANDBOX_BWRAP),
            default_timeout_seconds=float(env("TOOLS_TIMEOUT_SECONDS", "60")),
            max_output_bytes=int(env("TOOLS_MAX_OUTPUT_BYTES", str(64 * 1024))),
            limits=CommandLimits(processes=int(env("TOOLS_MAX_PROCESSES", str(CommandLimits.processes)))),
            shells=_flag("TOOLS_SHELLS", True),
            max_shells=int(env("TOOLS_MAX_SHELLS", "32")),
            max_shells_per_tenant=int(env("TOOLS_MAX_SHELLS_PER_TENANT", "8")),
            shell_idle_seconds=float(env("TOOLS_SHELL_IDLE_SECONDS", "600")),
            docker=DockerSettings(
                image=env("TOOLS_DOCKER_IMAGE", DockerSettings.image),
                host=env("TOOLS_DOCKER_HOST", os.environ.get("DOCKER_HOST", "")),
                owner=env("TOOLS_DOCKER_OWNER", DockerSettings.owner),
            ),
            policy_allow=_patterns("TOOLS_POLICY_ALLOW"),
            policy_deny=_patterns("TOOLS_POLICY_DENY"),
            max_archive_bytes=int(env("TOOLS_MAX_ARCHIVE_BYTES", str(256 * 1024**2))),
            tasks_address=tasks or env("TASKS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['tasks']}"),
        )


def _patterns(name: str) -> tuple[str, ...]:
    """Read AGENTRT_<name> as a JSON array of strings ("" = none).

    Raises:
        ValueError: the value is not a JSON array of strings.
    """
    text = env(name, "").strip()
    if not text:
        return ()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"AGENTRT_{name} must be a JSON array of strings: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"AGENTRT_{name} must be a JSON array of strings")
    return tuple(value)


def _flag(name: str, default: bool) -> bool:
    """Read AGENTRT_<name> as a boolean: 1/true/yes/on or 0/false/no/off ("" = default).

    Raises:
        ValueError: any other value.
    """
    text = env(name, "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"AGENTRT_{name} must be 1 or 0, not {text!r}")
