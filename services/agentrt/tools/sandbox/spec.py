"""The shapes every sandbox backend shares: a command, its ending, where a call runs.

`CommandRequest` / `CommandResult` / `CallerDeadline` are the contract of a command runner
(`local.LocalSandbox`, the docker backend's `ContainerRunner`): one `bash -c` command in a
workspace, bounded in time and output; the sandbox's own timeout is `timed_out`, the
caller's deadline is `CallerDeadline` (004 §2.7m). `ExecContext` says where one tool call
runs (workspace, environment, limits, kill group, runner); `SandboxSpec` / `SandboxInfo`
are what CreateSandbox asks for and what the lifecycle calls report. Data only: nothing
here runs anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agentrt.tools.config import CommandLimits
from agentrt.tools.files.paths import Workspace

LOCAL = "local"
DOCKER = "docker"
ABSENT = "absent"
STOPPED = "stopped"
RUNNING = "running"


class CallerDeadline(Exception):
    """The caller's deadline arrived before the command ended; it was killed.

    Attributes:
        output: what the command printed before the kill (capped).
    """

    def __init__(self, output: str) -> None:
        super().__init__("the caller's deadline passed")
        self.output = output


@dataclass(frozen=True)
class CommandRequest:
    """One command to run.

    Attributes:
        command: the shell text run as `bash -c command`.
        workspace: the workspace (the only writable place).
        workdir: host path of the working directory, inside the workspace.
        env: variables on top of BASE_ENV.
        timeout_seconds: the sandbox's own timer, seconds.
        limits: rlimits.
        max_output_bytes: output kept (head + tail), bytes.
        group: key of the sandbox the command belongs to ("" for none); StopSandbox kills by it.
    """

    command: str
    workspace: Workspace
    workdir: str
    env: Mapping[str, str]
    timeout_seconds: float
    limits: CommandLimits
    max_output_bytes: int
    group: str = ""


@dataclass
class CommandResult:
    """How a command ended.

    Attributes:
        exit_code: bash's exit status; 128+N when killed by signal N.
        timed_out: the sandbox's timer killed it.
        stopped: a StopSandbox/DestroySandbox killed it.
        output: stdout and stderr in arrival order, head and tail kept.
        truncated: some output was dropped.
        total_bytes: bytes the command printed.
        duration_seconds: wall time, seconds.
    """

    exit_code: int
    timed_out: bool
    stopped: bool
    output: str
    truncated: bool
    total_bytes: int
    duration_seconds: float


class Runner(Protocol):
    """What runs exec_command's commands: `LocalSandbox` or a docker `ContainerRunner`."""

    mode: str

    def require(self) -> None:
        """Raise MeshError FAILED_PRECONDITION/SANDBOX_UNAVAILABLE unless commands may run."""

    async def run(
        self, req: CommandRequest, *, emit: Callable[[str, str], None] | None, deadline: float | None
    ) -> CommandResult:
        """Run one command (see `LocalSandbox.run` for the contract)."""


@dataclass(frozen=True)
class ExecContext:
    """Where and how one call runs.

    Attributes:
        workspace: the prepared workspace.
        env: variables every command sees (on top of the sandbox's base environment).
        limits: rlimits of its commands.
        group: kill group ("tenant/sandbox_id"), "" without a sandbox.
        runner: the sandbox's command runner; None = the service's local runner.
        tenant: the caller's tenant (set by the executor; named shells are keyed by it).
    """

    workspace: Workspace
    env: dict[str, str] = field(default_factory=dict)
    limits: CommandLimits = field(default_factory=CommandLimits)
    group: str = ""
    runner: Runner | None = None
    tenant: str = ""


@dataclass(frozen=True)
class SandboxSpec:
    """What CreateSandbox asks for (see the proto for each field)."""

    sandbox_id: str = ""
    backend: str = ""
    workspace: str = ""
    image: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    network: str = ""
    cpu_seconds: int = 0
    memory_bytes: int = 0
    file_size_bytes: int = 0
    open_files: int = 0


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as reported: id, backend, state ("absent" | "stopped" | "running"), workspace."""

    sandbox_id: str
    backend: str
    state: str
    workspace: str = ""
