"""The docker engine as the docker sandbox backend uses it: one connection and sandbox containers.

Invariants (004 §2.7n–§2.7q; docs/services/tools.md "The docker backend"):
- Every engine call runs on a worker thread of this module's pool (the SDK blocks); the
  event loop never waits on the engine's socket.
- An unreachable engine raises FAILED_PRECONDITION/SANDBOX_UNAVAILABLE naming the address
  and the finding; the connection is made again on the next call, so the service keeps
  serving and recovers when the engine comes back.
- A sandbox's container has a fixed name derived from (workspace root, tenant, sandbox id).
  It is ours when its `agentrt.owner` label is this service's owner and its
  `agentrt.sandbox` label names the sandbox; any other container at the name is foreign:
  every by-name call raises FAILED_PRECONDITION/SANDBOX_FOREIGN and touches nothing.
  Acting calls (start, stop, remove) use the id that check resolved, never the name.
- `ensure` adopts our container when its `agentrt.fingerprint` label matches (starting it
  when stopped) and replaces it otherwise; the workspace is a bind mount, so its files
  survive both. Nothing is pulled: a missing image is SANDBOX_UNAVAILABLE.
- Pid 1 of a container is the keeper `agentrt-exec --init` (scripts/agentrt-exec.c); an
  image without it (no `agentrt.recipe` label) receives a copy taken from the default image.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import docker
import docker.errors
import requests
from docker.types import Ulimit

from agentrt.core.errors import MeshError, Reason, precondition
from agentrt.tools.config import CommandLimits, DockerSettings

T = TypeVar("T")

HELPER = "/.agentrt/agentrt-exec"
WORKSPACE = "/workspace"
OWNER_LABEL = "agentrt.owner"
SANDBOX_LABEL = "agentrt.sandbox"
FINGERPRINT_LABEL = "agentrt.fingerprint"
RECIPE_LABEL = "agentrt.recipe"
DEFAULT_ADDRESS = "unix:///var/run/docker.sock"
_STOP_GRACE_SECONDS = 2


def container_name(root: str, tenant: str, sandbox_id: str) -> str:
    """Return the container name of a sandbox: `agentrt-<id prefix>-<hash>`.

    The hash covers the service's workspace root, so two services sharing an engine (or
    two test servers) never contend for one name.
    """
    digest = hashlib.sha256(f"{root}\0{tenant}\0{sandbox_id}".encode()).hexdigest()[:20]
    prefix = "".join(c if c.isalnum() or c in "_.-" else "-" for c in sandbox_id[:32])
    return f"agentrt-{prefix}-{digest}"


@dataclass(frozen=True)
class ContainerSpec:
    """What a sandbox container is made of; `fingerprint` hashes all of it (004 §2.7n).

    Attributes:
        name: the container name (`container_name`).
        tenant: the sandbox's tenant.
        sandbox_id: the sandbox id.
        image: the image reference (never pulled).
        workspace: host path bound read-write at /workspace.
        env: variables on the container (every exec sees them).
        user: "" = the image's user (004 §2.7o), else "uid[:gid]" or a name.
        network: "" = no network (--network none), else the network to join.
        limits: memory (the container's), CPU seconds, file size and open files (rlimits).
        fingerprint: the adoption fingerprint, stored as a label.
    """

    name: str
    tenant: str
    sandbox_id: str
    image: str
    workspace: str
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    network: str = ""
    limits: CommandLimits = field(default_factory=CommandLimits)
    fingerprint: str = ""


class Engine:
    """A lazily (re)connected docker engine client plus the sandbox container lifecycle."""

    def __init__(self, settings: DockerSettings) -> None:
        """Create the engine handle; nothing connects until the first call."""
        self.settings = settings
        self.address = settings.host or DEFAULT_ADDRESS
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="agentrt-docker")
        self._lock = threading.Lock()
        self._client: docker.APIClient | None = None
        self._helper_tar: bytes | None = None

    # -- connection ---------------------------------------------------------------------

    def api(self) -> docker.APIClient:
        """Return the client, connecting first when needed (worker threads only).

        Raises:
            docker.errors.DockerException: the engine did not answer the version probe.
        """
        with self._lock:
            if self._client is None:
                self._client = docker.APIClient(
                    base_url=self.address,
                    version="auto",
                    timeout=int(self.settings.api_timeout_seconds),
                    max_pool_size=64,
                )
            return self._client

    def _forget(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def call(self, fn: Callable[[docker.APIClient], T]) -> T:
        """Run fn(client) on a worker thread.

        Raises:
            docker.errors.APIError: the engine answered with an error (the caller maps it).
            MeshError: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE when the engine is unreachable.
        """
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, lambda: fn(self.api()))
        except docker.errors.APIError:
            raise
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            self._forget()
            raise self.unreachable(exc) from None

    def unreachable(self, exc: BaseException) -> MeshError:
        """Return the error of an engine that did not answer."""
        return precondition(
            Reason.SANDBOX_UNAVAILABLE,
            f"the docker engine at {self.address} is unreachable: {str(exc)[:300]}",
        )

    async def close(self) -> None:
        """Close the connection and the worker pool."""
        self._forget()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- containers ---------------------------------------------------------------------

    async def resolve(self, name: str, tenant: str, sandbox_id: str) -> dict[str, Any] | None:
        """Return our container at name (its inspect document), or None when none holds it.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_FOREIGN when another container holds the
                name; SANDBOX_UNAVAILABLE when the engine is unreachable or refuses.
        """
        try:
            info: dict[str, Any] = await self.call(lambda api: api.inspect_container(name))
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise _refused(exc) from None
        labels = (info.get("Config") or {}).get("Labels") or {}
        if (
            labels.get(OWNER_LABEL) != self.settings.owner
            or labels.get(SANDBOX_LABEL) != f"{tenant}/{sandbox_id}"
        ):
            raise precondition(
                Reason.SANDBOX_FOREIGN,
                f"container {name!r} was not created by this tool service (its {OWNER_LABEL} label is "
                f"{labels.get(OWNER_LABEL, '<unset>')!r}); it is left untouched: remove or rename it, "
                "or use another sandbox_id",
            )
        return info

    async def state(self, name: str, tenant: str, sandbox_id: str) -> str:
        """Return "absent", "stopped" or "running" as the engine reports our container (§2.7p)."""
        info = await self.resolve(name, tenant, sandbox_id)
        if info is None:
            return "absent"
        return "running" if info["State"].get("Running") else "stopped"

    async def ensure(self, spec: ContainerSpec) -> str:
        """Adopt (fingerprint matches; started when stopped) or replace the container; return its id.

        Raises:
            MeshError: FAILED_PRECONDITION/SANDBOX_FOREIGN, SANDBOX_UNAVAILABLE (engine
                unreachable, image missing, the engine refused the container).
        """
        info = await self.resolve(spec.name, spec.tenant, spec.sandbox_id)
        if info is not None:
            cid: str = info["Id"]
            labels = info["Config"].get("Labels") or {}
            if labels.get(FINGERPRINT_LABEL) == spec.fingerprint:
                if not info["State"].get("Running"):
                    await self._engine_op(lambda api: api.start(cid))
                return cid
            await self._engine_op(lambda api: api.remove_container(cid, force=True))
        return await self._create(spec)

    async def stop(self, name: str, tenant: str, sandbox_id: str) -> None:
        """Stop our container by its resolved id (processes die; the filesystem stays)."""
        info = await self.resolve(name, tenant, sandbox_id)
        if info is not None and info["State"].get("Running"):
            cid = info["Id"]
            await self._engine_op(lambda api: api.stop(cid, timeout=_STOP_GRACE_SECONDS))

    async def remove(self, name: str, tenant: str, sandbox_id: str) -> None:
        """Remove our container by its resolved id (killed first when running); absent is fine."""
        info = await self.resolve(name, tenant, sandbox_id)
        if info is not None:
            cid = info["Id"]
            try:
                await self.call(lambda api: api.remove_container(cid, force=True))
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                raise _refused(exc) from None

    async def _engine_op(self, fn: Callable[[docker.APIClient], Any]) -> Any:
        try:
            return await self.call(fn)
        except docker.errors.APIError as exc:
            raise _refused(exc) from None

    async def _create(self, spec: ContainerSpec) -> str:
        try:
            image = await self.call(lambda api: api.inspect_image(spec.image))
        except docker.errors.NotFound:
            raise precondition(
                Reason.SANDBOX_UNAVAILABLE,
                f"image {spec.image!r} is not in the docker engine (nothing is pulled; "
                "scripts/docker-sandbox-image.sh builds the default image)",
            ) from None
        except docker.errors.APIError as exc:
            raise _refused(exc) from None
        needs_helper = not ((image.get("Config") or {}).get("Labels") or {}).get(RECIPE_LABEL)
        helper = await self._helper() if needs_helper else b""
        limits = spec.limits

        def create(api: docker.APIClient) -> str:
            host_config = api.create_host_config(
                binds={spec.workspace: {"bind": WORKSPACE, "mode": "rw"}},
                network_mode=spec.network or "none",
                mem_limit=limits.memory_bytes,
                pids_limit=self.settings.pids_limit or None,
                nano_cpus=int(self.settings.cpus * 1e9) or None,
                ulimits=[
                    Ulimit(name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds),
                    Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes),
                    Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                    Ulimit(name="core", soft=0, hard=0),
                ],
                security_opt=["no-new-privileges"],
            )
            created = api.create_container(
                spec.image,
                name=spec.name,
                entrypoint=[HELPER],
                command=["--init"],
                user=spec.user or None,
                environment=dict(spec.env),
                working_dir=WORKSPACE,
                hostname="sandbox",
                labels={
                    OWNER_LABEL: self.settings.owner,
                    SANDBOX_LABEL: f"{spec.tenant}/{spec.sandbox_id}",
                    FINGERPRINT_LABEL: spec.fingerprint,
                },
                host_config=host_config,
            )
            cid: str = created["Id"]
            try:
                if helper:
                    api.put_archive(cid, "/", helper)
                api.start(cid)
            except BaseException:
                api.remove_container(cid, force=True)
                raise
            return cid

        try:
            return await self.call(create)
        except docker.errors.APIError as exc:
            raise _refused(exc) from None

    async def _helper(self) -> bytes:
        """Return a tar holding `.agentrt/agentrt-exec`, copied once from the default image."""
        if self._helper_tar is not None:
            return self._helper_tar
        image = self.settings.image

        def fetch(api: docker.APIClient) -> bytes:
            holder = api.create_container(image, entrypoint=[HELPER], command=["--init"])
            try:
                stream, _ = api.get_archive(holder["Id"], HELPER)
                data = b"".join(stream)
            finally:
                api.remove_container(holder["Id"], force=True)
            with tarfile.open(fileobj=io.BytesIO(data)) as src:
                member = src.getmember("agentrt-exec")
                extracted = src.extractfile(member)
                assert extracted is not None
                blob = extracted.read()
            out = io.BytesIO()
            with tarfile.open(fileobj=out, mode="w") as dst:
                folder = tarfile.TarInfo(".agentrt")
                folder.type, folder.mode = tarfile.DIRTYPE, 0o755
                dst.addfile(folder)
                entry = tarfile.TarInfo(".agentrt/agentrt-exec")
                entry.size, entry.mode = len(blob), 0o755
                dst.addfile(entry, io.BytesIO(blob))
            return out.getvalue()

        try:
            self._helper_tar = await self.call(fetch)
        except docker.errors.APIError as exc:
            raise precondition(
                Reason.SANDBOX_UNAVAILABLE,
                f"images other than {image!r} need its process keeper, which could not be read "
                f"from it: {_explain(exc)} (scripts/docker-sandbox-image.sh builds it)",
            ) from None
        return self._helper_tar


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)[:300]


def _refused(exc: docker.errors.APIError) -> MeshError:
    return precondition(Reason.SANDBOX_UNAVAILABLE, f"the docker engine refused: {_explain(exc)}")
