"""Sandboxes and workspaces: where a call runs, with which environment and limits.

A local sandbox is a workspace directory plus settings (environment, limits), persisted,
with a lifecycle (004 §2.7n, §2.7p, §2.7q):
- Create adopts an existing id whose fingerprint (backend, workspace, env, limits, image,
  user, network) matches, and replaces it otherwise; files in the workspace survive both.
- Stop kills the sandbox's running commands (in this process) and marks it stopped; the
  files are kept and nothing else is promised. Create with the same settings resumes it.
- Destroy kills its commands, forgets it and removes the workspace when the service
  created it (a caller-provided directory is never deleted).
The docker backend is not built yet: asking for it answers FAILED_PRECONDITION/SANDBOX_UNAVAILABLE.

Calls without a sandbox run in the request's workspace, or `<root>/<tenant>/runs/<run_id>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, replace

from agentrt.core.errors import Reason, invalid, not_found, precondition
from agentrt.core.ids import new_id, valid_id
from agentrt.tools.config import CommandLimits, ToolsConfig
from agentrt.tools.paths import Workspace, check_workspace_path, open_workspace
from agentrt.tools.sandbox import LocalSandbox
from agentrt.tools.store import SandboxRecord, ToolStore

LOCAL = "local"
DOCKER = "docker"
ABSENT = "absent"
STOPPED = "stopped"
RUNNING = "running"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class ExecContext:
    """Where and how one call runs.

    Attributes:
        workspace: the prepared workspace.
        env: variables every command sees (on top of the sandbox's base environment).
        limits: rlimits of its commands.
        group: kill group ("tenant/sandbox_id"), "" without a sandbox.
    """

    workspace: Workspace
    env: dict[str, str] = field(default_factory=dict)
    limits: CommandLimits = field(default_factory=CommandLimits)
    group: str = ""


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


class SandboxManager:
    """Resolves where calls run and manages local sandboxes (see the module docstring)."""

    def __init__(self, config: ToolsConfig, store: ToolStore, runner: LocalSandbox) -> None:
        """Create the manager over the journal store and the command runner."""
        self.config = config
        self.store = store
        self.runner = runner
        self.root = os.path.realpath(config.resolved_workspace_root)
        self._protected = (os.path.realpath(config.server.state_dir),)
        self._allowed = (self.root,)

    def _open(self, path: str, *, owned: bool) -> Workspace:
        return open_workspace(
            path, make_parents=owned, sandbox_uid=self.config.sandbox_uid, sandbox_gid=self.config.sandbox_gid
        )

    def _check(self, path: str) -> str:
        return check_workspace_path(path, self._protected, self._allowed)

    async def context_for(self, tenant: str, run_id: str, sandbox_id: str, workspace: str) -> ExecContext:
        """Return where a call runs: its sandbox, its workspace, or the run's default workspace.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE for a bad workspace or both fields set;
                NOT_FOUND/SANDBOX_NOT_FOUND for an unknown sandbox; FAILED_PRECONDITION/
                SANDBOX_STOPPED for a stopped one.
        """
        if sandbox_id and workspace:
            raise invalid(Reason.INVALID_VALUE, "set sandbox_id or workspace, not both", field="workspace")
        if sandbox_id:
            rec = await self._get(tenant, sandbox_id)
            if rec.state != RUNNING:
                raise precondition(
                    Reason.SANDBOX_STOPPED, f"sandbox {sandbox_id!r} is stopped; CreateSandbox resumes it"
                )
            settings = json.loads(rec.settings_json)
            return ExecContext(
                self._open(rec.workspace, owned=rec.owns_workspace),
                dict(settings["env"]),
                self._limits(settings["limits"]),
                f"{tenant}/{sandbox_id}",
            )
        if workspace:
            return ExecContext(self._open(self._check(workspace), owned=False), {}, self.config.limits)
        path = os.path.join(self.root, tenant, "runs", run_id)
        return ExecContext(self._open(path, owned=True), {}, self.config.limits)

    def _limits(self, given: dict[str, int]) -> CommandLimits:
        base = self.config.limits
        return replace(base, **{k: v for k, v in given.items() if v > 0})

    async def _get(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        if not valid_id(sandbox_id):
            raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {sandbox_id!r}", field="sandbox_id")
        rec = await self.store.get_sandbox(tenant, sandbox_id)
        if rec is None:
            raise not_found(Reason.SANDBOX_NOT_FOUND, f"sandbox {sandbox_id!r} not found")
        return rec

    async def create(self, tenant: str, spec: SandboxSpec) -> SandboxInfo:
        """Create, adopt or replace a sandbox (004 §2.7n) and return it running.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE for the docker backend;
                INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for image/user/network on the local
                backend; INVALID_ARGUMENT/INVALID_ID, INVALID_VALUE for bad fields.
        """
        backend = spec.backend or LOCAL
        if backend not in (LOCAL, DOCKER):
            raise invalid(Reason.INVALID_VALUE, "unknown sandbox backend", field="backend")
        if backend == DOCKER:
            raise precondition(
                Reason.SANDBOX_UNAVAILABLE, "the docker backend is not available in this release"
            )
        for name in ("image", "user", "network"):
            if getattr(spec, name):
                raise invalid(
                    Reason.UNSUPPORTED_CAPABILITY,
                    f"the local backend has no {name}: commands run as an unprivileged user with no network",
                    field=name,
                )
        for key, value in spec.env.items():
            if not _ENV_NAME.match(key) or "\x00" in value:
                raise invalid(Reason.INVALID_VALUE, f"bad environment variable {key!r}", field="env")
        limits = {
            "cpu_seconds": spec.cpu_seconds,
            "memory_bytes": spec.memory_bytes,
            "file_size_bytes": spec.file_size_bytes,
            "open_files": spec.open_files,
        }
        if any(v < 0 for v in limits.values()):
            raise invalid(Reason.INVALID_VALUE, "limits must not be negative", field="limits")
        sandbox_id = spec.sandbox_id or new_id("sbx")
        if not valid_id(sandbox_id):
            raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {sandbox_id!r}", field="sandbox_id")
        owned = not spec.workspace
        path = (
            os.path.join(self.root, tenant, "sandboxes", sandbox_id) if owned else self._check(spec.workspace)
        )
        settings = {"env": dict(sorted(spec.env.items())), "limits": limits}
        identity = {
            **asdict(spec),
            "backend": backend,
            "workspace": path,
            "env": settings["env"],
            "sandbox_id": "",
        }
        fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        existing = await self.store.get_sandbox(tenant, sandbox_id)
        ws = self._open(path, owned=owned)
        if existing is not None and existing.fingerprint == fingerprint:
            await self.store.set_sandbox_state(tenant, sandbox_id, RUNNING)
            return SandboxInfo(sandbox_id, backend, RUNNING, ws.path)
        if existing is not None:
            self.runner.kill_group(f"{tenant}/{sandbox_id}")  # replaced: its processes do not carry over
        rec = SandboxRecord(
            tenant,
            sandbox_id,
            backend,
            RUNNING,
            ws.path,
            owned or bool(existing and existing.owns_workspace and existing.workspace == ws.path),
            json.dumps(settings),
            fingerprint,
        )
        await self.store.put_sandbox(rec)
        return SandboxInfo(sandbox_id, backend, RUNNING, ws.path)

    async def get(self, tenant: str, sandbox_id: str) -> SandboxInfo:
        """Return a sandbox; state "absent" when unknown.

        Raises:
            MeshError: INVALID_ARGUMENT/MISSING_FIELD or INVALID_ID for a bad id.
        """
        if not valid_id(sandbox_id):
            raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {sandbox_id!r}", field="sandbox_id")
        rec = await self.store.get_sandbox(tenant, sandbox_id)
        if rec is None:
            return SandboxInfo(sandbox_id, LOCAL, ABSENT)
        return SandboxInfo(sandbox_id, rec.backend, rec.state, rec.workspace)

    async def stop(self, tenant: str, sandbox_id: str) -> SandboxInfo:
        """Stop a sandbox: kill its running commands, keep its files (004 §2.7p).

        Raises:
            MeshError: NOT_FOUND/SANDBOX_NOT_FOUND; INVALID_ARGUMENT/INVALID_ID.
        """
        rec = await self._get(tenant, sandbox_id)
        self.runner.kill_group(f"{tenant}/{sandbox_id}")
        await self.store.set_sandbox_state(tenant, sandbox_id, STOPPED)
        return SandboxInfo(sandbox_id, rec.backend, STOPPED, rec.workspace)

    async def destroy(self, tenant: str, sandbox_id: str) -> None:
        """Destroy a sandbox: kill its commands, forget it, remove a workspace the service made.

        Raises:
            MeshError: NOT_FOUND/SANDBOX_NOT_FOUND; INVALID_ARGUMENT/INVALID_ID.
        """
        rec = await self._get(tenant, sandbox_id)
        self.runner.kill_group(f"{tenant}/{sandbox_id}")
        await self.store.delete_sandbox(tenant, sandbox_id)
        if rec.owns_workspace and rec.workspace.startswith(self.root + "/"):
            # rmtree works on descriptors here, so a symlink planted inside cannot redirect it.
            await asyncio.to_thread(shutil.rmtree, rec.workspace, True)
