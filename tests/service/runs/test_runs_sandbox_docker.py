"""A run's docker sandbox (issue 11 "Sandboxes for runs"; 004 §2.7n–§2.7q) against the real engine.

The run's commands run in a container of the image, with the sandbox's env and no network,
a resume after approval finds the same container, and the container is removed when the run
ends. Slow (containers); skips locally without an engine and the sandbox image and FAILS
under CI, as tests/service/tools/test_tools_docker.py does.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.harness import agent
from tests.service.runs.sandbox_helpers import (
    DOCKER,
    IMAGE,
    approve_pending,
    docker_mesh,  # noqa: F401 - the fixture
    outputs,
    owned_containers,
    released,
    sh,
    start,
)


@pytest.mark.slow
async def test_a_runs_commands_run_in_its_container_offline_with_its_env(docker_mesh):  # noqa: F811
    mesh = docker_mesh
    assert not os.path.exists("/.agentrt")  # only the image has it
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    sh('test -d /.agentrt && echo "in-the-image"; echo "token=$TOKEN"; ls /sys/class/net')
                ]
            ),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER, image=IMAGE, env={"TOKEN": "t-123"}),
        ),
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    (out,) = await outputs(mesh, started.session_id)
    assert "in-the-image" in out and "token=t-123" in out, out
    # network off by default: the container has the loopback interface only
    assert out.split("token=t-123", 1)[1].split() == ["lo"], out
    await released(mesh, started.sandbox_id)
    assert await asyncio.to_thread(owned_containers, mesh.docker_owner) == []  # the container is gone


@pytest.mark.slow
async def test_a_resume_after_approval_uses_the_same_container(docker_mesh):  # noqa: F811
    mesh = docker_mesh
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo kept > /tmp/note; hostname")]),
            Reply(tool_calls=[sh("cat /tmp/note; hostname")]),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER),
        ),
    )
    for _ in range(2):
        run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
        await approve_pending(mesh, run)
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    first, second = await outputs(mesh, started.session_id)
    # /tmp is the container's own (not the workspace): the same container answered both calls
    assert "kept" in second, second
    assert first.split()[-1] == second.split()[-1], (first, second)
    await released(mesh, started.sandbox_id)
    assert await asyncio.to_thread(owned_containers, mesh.docker_owner) == []
