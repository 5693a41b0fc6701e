"""The mesh of deploy/compose.yaml in containers of agentrt's image, on PostgreSQL: a run
completes through the containers with the provider emulator (in a container of the same
network) as the model; then the session service's container is killed (SIGKILL) and started
again, and the mesh serves the next run.

The images are built here by scripts/docker-image.sh (cached by their recipe label, so a
second run builds nothing). The topology comes from the compose file, read and run by
compose_driver (the docker SDK); the test talks only to ports published on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from compose_driver import ComposeProject, docker_ready
from e2e_helpers import STATE_TIMEOUT, wait_for
from rich.console import Console

from agentrt.cli.run import build_agent, follow_run, terminal_approver
from agentrt.client.channels import MeshClient
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.needs import unavailable

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "compose-test-token"
EMULATOR_PORT = 8000


def _emulator(address: str, path: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{address}{path}", data=data, method="GET" if body is None else "POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def _emulator_up(address: str) -> bool:
    try:
        _emulator(address, "/_emulator/requests")
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def mesh():
    if not docker_ready():
        unavailable("no docker engine answers (make docker-sandbox starts one)")
    built = subprocess.run(
        ["scripts/docker-image.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    assert built.returncode == 0, built.stdout + built.stderr
    env = {
        "AGENTRT_AUTH_TOKEN": TOKEN,
        "AGENTRT_RUNS_PORT": "0",
        "AGENTRT_OPENAI_BASE_URL": f"http://emulator:{EMULATOR_PORT}/v1",
        "AGENTRT_OPENAI_API_KEY": "test-key",
        "AGENTRT_DEFAULT_MODEL": "openai:gpt-emu",
        "AGENTRT_GATEWAY_MAX_RETRIES": "0",
    }
    emulator = {
        "image": "agentrt:local",
        "entrypoint": ["python3", "-m", "tests.emulators.providers"],
        "command": ["--host", "0.0.0.0", "--port", str(EMULATOR_PORT)],
        "working_dir": "/opt/emulator",
        "volumes": [f"{ROOT / 'tests'}:/opt/emulator/tests:ro"],
        "ports": [f"127.0.0.1:0:{EMULATOR_PORT}"],
        "healthcheck": {"test": ["NONE"]},  # not a mesh service: no grpc.health to ask
    }
    project = ComposeProject(ROOT / "deploy/compose.yaml", env, extra={"emulator": emulator})
    try:
        project.up(timeout=STATE_TIMEOUT)
        project.wait_healthy("runs", STATE_TIMEOUT)
        emu = project.published("emulator", EMULATOR_PORT)
        wait_for(lambda: _emulator_up(emu), "the provider emulator's container")
        yield project, project.published("runs", 50051), emu
    finally:
        project.down()


async def _run(runs: str, task: str) -> tuple[pb.Run, list[pb.RunEvent]]:
    request = pb.StartRunRequest(
        agent=build_agent(cpb.ModelRef(provider="openai", model="gpt-emu"), max_turns=5), input=task
    )
    console = Console(file=io.StringIO(), width=120)
    client = MeshClient(runs=runs, token=TOKEN)
    try:
        outcome = await asyncio.wait_for(
            follow_run(client, request, console, terminal_approver(console, False, False)), STATE_TIMEOUT
        )
    finally:
        await client.close()
    return outcome.run, outcome.events


def _script_tool_then_answer(emu: str, name: str, tool: str, arguments: dict[str, str]) -> None:
    _emulator(
        emu,
        "/_emulator/script",
        [
            {"tool_calls": [{"name": tool, "arguments": json.dumps(arguments)}]},
            {"text": f"wrote {name}"},
        ],
    )


def _results(events: list[pb.RunEvent]) -> list[cpb.ToolResult]:
    return [e.tool_returned.result for e in events if e.HasField("tool_returned")]


async def test_a_run_completes_through_the_containers_and_survives_a_killed_container(mesh):
    project, runs, emu = mesh
    # A command in the tools container's bubblewrap sandbox.
    command = {"cmd": "echo from-the-sandbox > first.txt && cat first.txt"}
    _script_tool_then_answer(emu, "first.txt", "exec_command", command)
    first, events = await _run(runs, "Write first.txt, then say so.")
    assert first.status == cpb.RUN_STATUS_COMPLETED, (first, project.logs("tools"))
    assert first.final_output == "wrote first.txt"
    (result,) = _results(events)
    assert result.status == cpb.TOOL_RESULT_STATUS_OK and result.exit_code == 0, result
    assert "from-the-sandbox" in result.content
    assert len(_emulator(emu, "/_emulator/requests")) == 2

    # The session store dies outright and comes back (same name, maybe a new address).
    project.containers["sessions"].kill()
    wait_for(lambda: project.status("sessions")[0] == "exited", "the killed container to stop")
    project.containers["sessions"].start()
    project.wait_healthy("sessions", STATE_TIMEOUT)

    _script_tool_then_answer(emu, "second.txt", "write_file", {"path": "second.txt", "content": "again"})
    second, events = await _run(runs, "Write second.txt, then say so.")
    assert second.status == cpb.RUN_STATUS_COMPLETED, (second, project.logs("runs"))
    assert second.final_output == "wrote second.txt"
    assert len(_emulator(emu, "/_emulator/requests")) == 4
    assert [r.status for r in _results(events)] == [cpb.TOOL_RESULT_STATUS_OK]
    # Both runs' sessions are in the one PostgreSQL, read through the restarted container.
    assert first.session_id != second.session_id
