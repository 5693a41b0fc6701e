"""Sandboxes and workspaces: where a call runs, with which environment and limits.

A local sandbox is a workspace directory plus settings (environment, limits), persisted,
with a lifecycle (004 §2.7n, §2.7p, §2.7q):
- Create adopts an existing id whose fingerprint (backend, workspace, env, limits, image,
  user, network) matches, and replaces it otherwise; files in the workspace survive both.
- Stop kills the sandbox's running commands and closes its named shells (in this
  process) and marks it stopped; the
  files are kept and nothing else is promised. Create with the same settings resumes it.
- Destroy kills its commands, forgets it and removes the workspace when the service
  created it (a caller-provided directory is never deleted).
A docker sandbox (backend "docker", docker/backend.py) is the same record plus one persistent
container: its fingerprint (workspace, image, env, user, network, limits) is also the
container's `agentrt.fingerprint` label; Create adopts the container when it matches and
replaces it otherwise; Get reports the engine's state; Stop stops and Destroy removes the
container; a container this service did not create is never touched (SANDBOX_FOREIGN).

Calls without a sandbox run in the request's workspace, or `<root>/<tenant>/runs/<run_id>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from typing import Any

from agentrt.core.errors import Reason, invalid, not_found, precondition, quote
from agentrt.core.ids import new_id, valid_id
from agentrt.tools.config import CommandLimits, ToolsConfig
from agentrt.tools.docker.backend import DockerSandbox
from agentrt.tools.docker.engine import ContainerSpec, container_name
from agentrt.tools.files.paths import Workspace, open_workspace
from agentrt.tools.sandbox.local import LocalSandbox
from agentrt.tools.sandbox.spec import (
    ABSENT,
    DOCKER,
    LOCAL,
    RUNNING,
    STOPPED,
    ExecContext,
    SandboxInfo,
    SandboxSpec,
)
from agentrt.tools.sandbox.workspaces import WorkspaceRules
from agentrt.tools.storage.store import SandboxRecord, ToolStore

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_DOCKER_FIELDS = {
    "image": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}\Z"),
    "user": re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?\Z"),
    "network": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z"),
}


class SandboxManager:
    """Resolves where calls run and manages local sandboxes (see the module docstring)."""

    def __init__(
        self, config: ToolsConfig, store: ToolStore, runner: LocalSandbox, docker: DockerSandbox | None = None
    ) -> None:
        """Create the manager over the journal store, the local runner and the docker backend.

        The docker backend contacts its engine only when a docker sandbox is used.
        """
        self.config = config
        self.store = store
        self.runner = runner
        self.docker = docker or DockerSandbox(config.docker, config.max_progress_bytes)
        self.root = os.path.realpath(config.resolved_workspace_root)
        roots = tuple(dict.fromkeys((self.root, config.resolved_workspace_root)))
        self.rules = WorkspaceRules(roots, (os.path.realpath(config.server.state_dir),))
        #: called with the kill group when a sandbox's processes must end (stop, destroy,
        #: replace); the executor's named shells register here (004 §2.7k)
        self.on_release: list[Callable[[str], Awaitable[object]]] = []

    async def _end_processes(self, tenant: str, sandbox_id: str) -> None:
        """Kill a sandbox's running commands and close its named shells (this process)."""
        group = f"{tenant}/{sandbox_id}"
        self.runner.kill_group(group)
        for release in self.on_release:
            await release(group)

    def _open(self, tenant: str, path: str, *, owned: bool, create: bool = True) -> Workspace:
        """Open a workspace: one the service made below its root, or a checked explicit one.

        A workspace the service made is walked from the root without following symlinks;
        an explicit one passes the rules as requested and again as opened (a component
        swapped for a symlink in between is caught). Only a directory made here is chowned.
        """
        uid, gid = self.config.sandbox_uid, self.config.sandbox_gid
        if owned and path.startswith(self.root + "/"):
            return open_workspace(
                path, make_parents=True, sandbox_uid=uid, sandbox_gid=gid, base=self.root, create=create
            )
        real = self._check(path, tenant, create=create)
        return open_workspace(
            real,
            make_parents=False,
            sandbox_uid=uid,
            sandbox_gid=gid,
            create=create,
            check=lambda opened: self.rules.refuse_if_bad(path, opened, tenant),
        )

    def _check(self, path: str, tenant: str, *, create: bool = True) -> str:
        """Validate an explicit workspace (`WorkspaceRules.check`); return its real path."""
        if create:  # the tenant's own directory, where its explicit workspaces may lie
            os.makedirs(os.path.join(self.root, tenant), mode=0o755, exist_ok=True)
        return self.rules.check(path, tenant)

    async def context_for(
        self, tenant: str, run_id: str, sandbox_id: str, workspace: str, *, create: bool = True
    ) -> ExecContext:
        """Return where a call runs: its sandbox, its workspace, or the run's default workspace.

        Args:
            tenant: the caller's tenant (an explicit workspace in the workspace root must lie
                in this tenant's directory).
            run_id: the run (its default workspace when neither other field is set).
            sandbox_id: a sandbox, or "".
            workspace: an explicit absolute directory, or "".
            create: make a missing workspace; False (downloads) answers NOT_FOUND instead.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE for a refused workspace or both fields
                set; NOT_FOUND/SANDBOX_NOT_FOUND for an unknown sandbox, WORKSPACE_NOT_FOUND
                for a missing workspace when not create; FAILED_PRECONDITION/SANDBOX_STOPPED
                for a stopped sandbox.
        """
        if sandbox_id and workspace:
            raise invalid(Reason.INVALID_VALUE, "set sandbox_id or workspace, not both", field="workspace")
        if sandbox_id:
            rec = await self._get(tenant, sandbox_id)
            if rec.state != RUNNING:
                raise precondition(
                    Reason.SANDBOX_STOPPED,
                    f"sandbox {quote(sandbox_id)} is stopped; CreateSandbox resumes it",
                )
            settings = json.loads(rec.settings_json)
            if rec.backend == DOCKER:  # its env is on the container (004 §2.7n)
                return ExecContext(
                    self._open(tenant, rec.workspace, owned=rec.owns_workspace, create=create),
                    {},
                    self._limits(settings["limits"]),
                    f"{tenant}/{sandbox_id}",
                    self.docker.runner_for(settings["docker"]["container"]),
                )
            return ExecContext(
                self._open(tenant, rec.workspace, owned=rec.owns_workspace, create=create),
                dict(settings["env"]),
                self._limits(settings["limits"]),
                f"{tenant}/{sandbox_id}",
            )
        if workspace:
            return ExecContext(
                self._open(tenant, workspace, owned=False, create=create), {}, self.config.limits
            )
        path = os.path.join(self.root, tenant, "runs", run_id)
        return ExecContext(self._open(tenant, path, owned=True, create=create), {}, self.config.limits)

    def _limits(self, given: dict[str, int]) -> CommandLimits:
        base = self.config.limits
        return replace(base, **{k: v for k, v in given.items() if v > 0})

    async def _get(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        if not valid_id(sandbox_id):
            raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {quote(sandbox_id)}", field="sandbox_id")
        rec = await self.store.get_sandbox(tenant, sandbox_id)
        if rec is None:
            raise not_found(Reason.SANDBOX_NOT_FOUND, f"sandbox {quote(sandbox_id)} not found")
        return rec

    async def create(self, tenant: str, spec: SandboxSpec) -> SandboxInfo:
        """Create, adopt or replace a sandbox (004 §2.7n) and return it running.

        Raises:
            MeshError: INVALID_ARGUMENT/UNSUPPORTED_CAPABILITY for image/user/network on the
                local backend; INVALID_ARGUMENT/INVALID_ID, INVALID_VALUE for bad fields;
                docker: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE (engine unreachable, image
                missing, container refused), SANDBOX_FOREIGN (another container holds the name).
        """
        backend = spec.backend or LOCAL
        if backend not in (LOCAL, DOCKER):
            raise invalid(Reason.INVALID_VALUE, "unknown sandbox backend", field="backend")
        for name in ("image", "user", "network"):
            value = getattr(spec, name)
            if backend == DOCKER and value and not _DOCKER_FIELDS[name].match(value):
                raise invalid(Reason.INVALID_VALUE, f"malformed {name} {value[:64]!r}", field=name)
            if backend == DOCKER and name == "network" and value == "host":
                raise invalid(
                    Reason.INVALID_VALUE,
                    "the host network is refused: it would open the host's loopback services",
                    field="network",
                )
            if backend == LOCAL and value:
                raise invalid(
                    Reason.UNSUPPORTED_CAPABILITY,
                    f"the local backend has no {name}: commands run as an unprivileged user with no network",
                    field=name,
                )
        for key, value in spec.env.items():
            if not _ENV_NAME.match(key) or "\x00" in value:
                raise invalid(Reason.INVALID_VALUE, f"bad environment variable {quote(key)}", field="env")
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
            raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {quote(sandbox_id)}", field="sandbox_id")
        owned = not spec.workspace
        path = (
            os.path.join(self.root, tenant, "sandboxes", sandbox_id)
            if owned
            else self._check(spec.workspace, tenant)
        )
        if backend == DOCKER:
            return await self._create_docker(tenant, spec, sandbox_id, path, owned, limits)
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
        ws = self._open(tenant, path, owned=owned)
        if existing is not None and existing.fingerprint == fingerprint:
            await self.store.set_sandbox_state(tenant, sandbox_id, RUNNING)
            return SandboxInfo(sandbox_id, backend, RUNNING, ws.path)
        if existing is not None:
            await self._end_processes(tenant, sandbox_id)  # replaced: its processes do not carry over
            if existing.backend == DOCKER:
                await self.docker.remove(container_name(self.root, tenant, sandbox_id), tenant, sandbox_id)
        return await self._save(tenant, sandbox_id, backend, ws, owned, existing, settings, fingerprint)

    async def _save(
        self,
        tenant: str,
        sandbox_id: str,
        backend: str,
        ws: Workspace,
        owned: bool,
        existing: SandboxRecord | None,
        settings: dict[str, Any],
        fingerprint: str,
    ) -> SandboxInfo:
        """Store a created (or replacing) sandbox as running; the workspace stays owned when it was."""
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
            raise invalid(Reason.INVALID_ID, f"malformed sandbox_id {quote(sandbox_id)}", field="sandbox_id")
        rec = await self.store.get_sandbox(tenant, sandbox_id)
        if rec is None:
            return SandboxInfo(sandbox_id, LOCAL, ABSENT)
        if rec.backend == DOCKER:  # the engine's word, not the record's (004 §2.7p)
            name = container_name(self.root, tenant, sandbox_id)
            state = await self.docker.state(name, tenant, sandbox_id)
            return SandboxInfo(sandbox_id, DOCKER, state, rec.workspace)
        return SandboxInfo(sandbox_id, rec.backend, rec.state, rec.workspace)

    async def stop(self, tenant: str, sandbox_id: str) -> SandboxInfo:
        """Stop a sandbox: kill its running commands, keep its files (004 §2.7p).

        Raises:
            MeshError: NOT_FOUND/SANDBOX_NOT_FOUND; INVALID_ARGUMENT/INVALID_ID.
        """
        rec = await self._get(tenant, sandbox_id)
        if rec.backend == DOCKER:
            await self.docker.stop(container_name(self.root, tenant, sandbox_id), tenant, sandbox_id)
        await self._end_processes(tenant, sandbox_id)
        await self.store.set_sandbox_state(tenant, sandbox_id, STOPPED)
        return SandboxInfo(sandbox_id, rec.backend, STOPPED, rec.workspace)

    async def destroy(self, tenant: str, sandbox_id: str) -> None:
        """Destroy a sandbox: kill its commands, forget it, remove a workspace the service made.

        Raises:
            MeshError: NOT_FOUND/SANDBOX_NOT_FOUND; INVALID_ARGUMENT/INVALID_ID.
        """
        rec = await self._get(tenant, sandbox_id)
        if rec.backend == DOCKER:
            await self.docker.remove(container_name(self.root, tenant, sandbox_id), tenant, sandbox_id)
        await self._end_processes(tenant, sandbox_id)
        await self.store.delete_sandbox(tenant, sandbox_id)
        if rec.owns_workspace and rec.workspace.startswith(self.root + "/"):
            # rmtree works on descriptors here, so a symlink planted inside cannot redirect it.
            await asyncio.to_thread(shutil.rmtree, rec.workspace, True)

    async def _create_docker(
        self, tenant: str, spec: SandboxSpec, sandbox_id: str, path: str, owned: bool, limits: dict[str, int]
    ) -> SandboxInfo:
        """Create, adopt or replace a docker sandbox's container (004 §2.7n–§2.7q)."""
        image = spec.image or self.config.docker.image
        env = dict(sorted(spec.env.items()))
        resolved = self._limits(limits)
        docker = self.config.docker
        identity = {
            "backend": DOCKER,
            "workspace": path,
            "image": image,
            "env": env,  # an empty map hashes like an absent one (both {})
            "user": spec.user,
            "network": spec.network,
            # the container's own pids_limit bounds its processes, not RLIMIT_NPROC
            "limits": {k: v for k, v in asdict(resolved).items() if k != "processes"},
            "cpus": docker.cpus,
            "pids_limit": docker.pids_limit,
        }
        fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        existing = await self.store.get_sandbox(tenant, sandbox_id)
        ws = self._open(tenant, path, owned=owned)
        name = container_name(self.root, tenant, sandbox_id)
        if existing is not None and existing.backend != DOCKER:
            await self._end_processes(tenant, sandbox_id)
        container = await self.docker.ensure(
            ContainerSpec(
                name, tenant, sandbox_id, image, ws.path, env, spec.user, spec.network, resolved, fingerprint
            )
        )
        settings = {
            "env": env,
            "limits": limits,
            "docker": {"container": container, "name": name, "image": image},
        }
        return await self._save(tenant, sandbox_id, DOCKER, ws, owned, existing, settings, fingerprint)
