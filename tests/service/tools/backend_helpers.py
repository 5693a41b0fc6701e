"""Helpers of the backend suites (test_tools_backends.py, test_tools_docker.py).

`open_box` starts the production ToolService with a unique docker owner label, creates a
sandbox of the asked backend, and on the way out removes every container carrying that
label, so a failed test leaves no container behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from tools_helpers import ToolsEnv, make_config, until  # noqa: F401 - until: re-exported

from agentrt.tools.config import DockerSettings
from agentrt.tools.docker.engine import OWNER_LABEL, container_name
from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc
from tests.needs import unavailable

TIMED_OUT = common_pb2.TOOL_RESULT_STATUS_TIMED_OUT
INTERRUPTED = common_pb2.TOOL_RESULT_STATUS_INTERRUPTED
BACKEND = {"local": pb.SANDBOX_BACKEND_LOCAL, "docker": pb.SANDBOX_BACKEND_DOCKER}
IMAGE = DockerSettings().image


def marker_of() -> str:
    return f"agentrt-mark-{os.urandom(6).hex()}"


def split(marker: str) -> str:
    """The marker as shell text that does not contain it (`agentrt-ma''rk-...`).

    Only a process the shell started carries the marker in its command line, never the
    command text itself, so finding it on the host means that process runs.
    """
    return f"{marker[:10]}''{marker[10:]}"


def grandchild(marker: str) -> str:
    """Shell text that leaves a setsid'd grandchild (a bash whose command line holds marker) running.

    Not `exec -a`: busybox applets pick themselves by argv[0].
    """
    return f"setsid bash -c 'sleep 300; : '{split(marker)} </dev/null >/dev/null 2>&1 &"


def docker_api():
    import docker

    return docker.APIClient(version="auto", timeout=30)


def docker_problem() -> str:
    """Why the docker backend cannot be tested here ("" when it can)."""
    try:
        api = docker_api()
        api.inspect_image(IMAGE)
    except Exception as exc:  # noqa: BLE001 - any failure is the reason
        return (
            f"docker engine or image {IMAGE} unavailable ({exc}); "
            "scripts/start-dockerd.sh and scripts/docker-sandbox-image.sh provide them"
        )
    return ""


def remove_owned(owner: str) -> None:
    api = docker_api()
    for c in api.containers(all=True, filters={"label": f"{OWNER_LABEL}={owner}"}):
        api.remove_container(c["Id"], force=True)


@dataclass
class Box:
    """A running service, a sandbox of one backend in it, and its helpers."""

    env: ToolsEnv
    backend: str
    sandbox_id: str
    workspace: str
    owner: str

    async def create(self, sandbox_id: str | None = None, **kw) -> pb.Sandbox:
        req = pb.CreateSandboxRequest(
            sandbox_id=sandbox_id or self.sandbox_id, backend=BACKEND[self.backend], **kw
        )
        return (await self.env.stub.CreateSandbox(req)).sandbox

    async def sh(self, cmd: str, **kw) -> common_pb2.ToolResult:
        kw.setdefault("sandbox_id", self.sandbox_id)
        return await self.env.sh(cmd, **kw)

    def request(self, cmd: str, **kw) -> pb.ExecuteToolRequest:
        kw.setdefault("sandbox_id", self.sandbox_id)
        return self.env.request("exec_command", {"cmd": cmd}, **kw)

    def container(self, sandbox_id: str | None = None) -> str:
        root = os.path.realpath(self.env.config.resolved_workspace_root)
        return container_name(root, "default", sandbox_id or self.sandbox_id)


@contextlib.asynccontextmanager
async def open_box(start_server, tmp_path, backend: str, **overrides) -> AsyncIterator[Box]:
    """Start a service and create a sandbox of backend in it (env GREETING=hello).

    Without a usable docker engine and image, a docker box skips locally and fails under CI.
    """
    owner = f"agentrt-test-{os.urandom(4).hex()}"
    if backend == "docker":
        problem = await asyncio.to_thread(docker_problem)
        if problem:
            unavailable(problem)
    overrides.setdefault("docker", DockerSettings(owner=owner))
    owner = overrides["docker"].owner
    config = make_config(tmp_path, **overrides)
    address = await start_server(build_server(config))
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            env = ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws")
            box = Box(env, backend, f"sbx_{os.urandom(4).hex()}", "", owner)
            box.workspace = (await box.create(env={"GREETING": "hello"})).workspace
            yield box
    finally:
        if backend == "docker":
            await asyncio.to_thread(remove_owned, owner)
