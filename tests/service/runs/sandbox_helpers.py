"""Helpers of the run sandbox tests (test_runs_sandbox*.py): the tool service's view of a run's
sandbox, the run's tool outputs, and the docker engine (a mesh whose tool service labels its
containers with the test's own owner, removed afterwards).
"""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest

from agentrt.tools.config import DockerSettings
from agentrt.tools.docker.engine import OWNER_LABEL
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import ToolCallReply
from tests.needs import unavailable
from tests.service.runs.harness import WAIT_S, Mesh, start_mesh

LOCAL, DOCKER = tpb.SANDBOX_BACKEND_LOCAL, tpb.SANDBOX_BACKEND_DOCKER
ABSENT, RUNNING = tpb.SANDBOX_STATE_ABSENT, tpb.SANDBOX_STATE_RUNNING
IMAGE = DockerSettings().image


def sh(cmd: str) -> ToolCallReply:
    return ToolCallReply("exec_command", json.dumps({"cmd": cmd}))


def tools(mesh: Mesh) -> tpb_grpc.ToolServiceStub:
    return tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))


async def sandbox_state(mesh: Mesh, sandbox_id: str) -> tpb.Sandbox:
    return (await tools(mesh).GetSandbox(tpb.GetSandboxRequest(sandbox_id=sandbox_id))).sandbox


async def released(mesh: Mesh, sandbox_id: str) -> None:
    """Wait until the tool service no longer has the sandbox (the run releases it once its
    end is stored, so right after GetRun says it ended it may still be going; WAIT_S bound)."""

    async def poll() -> None:
        while (await sandbox_state(mesh, sandbox_id)).state != ABSENT:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), WAIT_S)


async def outputs(mesh: Mesh, session_id: str) -> list[str]:
    """The tool results the session keeps, in order (content)."""
    entries = await mesh.entries(session_id)
    return [e.item.tool_result.content for e in entries if e.item.HasField("tool_result")]


async def start(mesh: Mesh, request: pb.StartRunRequest) -> pb.Run:
    """StartRun, then the run as GetRun reports it right away."""
    started = await mesh.runs.StartRun(request)
    return (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run


async def approve_pending(mesh: Mesh, run: pb.Run) -> None:
    decisions = [pb.ApprovalDecision(call_id=p.call.call_id, approved=True) for p in run.pending_calls]
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run.run_id, decisions=decisions))


def docker_api():
    import docker

    return docker.APIClient(version="auto", timeout=30)


def docker_problem() -> str:
    """Why the docker backend cannot be used here ("" when it can)."""
    try:
        docker_api().inspect_image(IMAGE)
    except Exception as exc:  # noqa: BLE001 - any failure is the reason
        return (
            f"docker engine or image {IMAGE} unavailable ({exc}); scripts/start-dockerd.sh and "
            "scripts/docker-sandbox-image.sh provide them"
        )
    return ""


def owned_containers(owner: str) -> list[dict[str, object]]:
    return docker_api().containers(all=True, filters={"label": f"{OWNER_LABEL}={owner}"})


def remove_owned(owner: str) -> None:
    """Remove what a test left; one the run is releasing itself may be gone already."""
    import docker

    for c in owned_containers(owner):
        try:
            docker_api().remove_container(c["Id"], force=True)
        except docker.errors.APIError as exc:
            if exc.status_code not in (404, 409):  # gone, or its removal in progress
                raise


@pytest.fixture
async def docker_mesh(start_server, tmp_path, emulator):
    """The mesh whose tool service labels its containers with this test's own owner."""
    problem = await asyncio.to_thread(docker_problem)
    if problem:
        unavailable(problem)
    owner = f"agentrt-test-{os.urandom(4).hex()}"
    mesh = await start_mesh(
        start_server, tmp_path, emulator, tools_kw={"docker": DockerSettings(owner=owner)}
    )
    mesh.docker_owner = owner  # type: ignore[attr-defined]
    try:
        yield mesh
    finally:
        await asyncio.to_thread(remove_owned, owner)
