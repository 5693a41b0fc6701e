"""A run's sandbox across a takeover, a drain and a tool service that is down at the run's end.

Replicas are stopped the way a killed process stops (test_runs_takeover.crash) or drained;
the continuing replica adopts the run's sandbox (same id, same files, same container), the
model is never asked twice, and a release the tool service missed is retried once it is back.
kill -9 of real processes: tests/e2e/test_chaos.py.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from agentrt.tools.config import DockerSettings
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from tests.emulators.providers import Reply, ToolCallReply
from tests.needs import unavailable
from tests.service.runs.harness import Mesh, agent, start_mesh, start_replica
from tests.service.runs.sandbox_helpers import (
    DOCKER,
    LOCAL,
    RUNNING,
    docker_problem,
    outputs,
    owned_containers,
    released,
    remove_owned,
    sandbox_state,
    sh,
    start,
    tools,
)


async def _takeover(start_server, mesh: Mesh, backend: int, first: str, second: str) -> tuple[str, str]:
    """Crash the runs replica while the run's first command runs; a second replica takes the
    run over and runs the second command. Return both results."""
    from agentrt.core.decide import mint_call_id
    from tests.service.runs.test_runs_takeover import crash, until

    mesh.emu.script([Reply(tool_calls=[sh(first)]), Reply(tool_calls=[sh(second)]), Reply(text="done")])
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=backend),
        ),
    )
    call_id = mint_call_id(started.run_id, 1, 0)

    async def tool_running() -> bool:
        got = await tools(mesh).GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED

    await until(tool_running, "the first command to be running in the tool service")
    crash(mesh.runs_server)
    replica_b, stub = await start_replica(mesh, start_server)

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to complete the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.sandbox_id == started.sandbox_id
    await released(mesh, started.sandbox_id)
    one, two = await outputs(mesh, started.session_id)
    return one, two


async def test_a_takeover_continues_in_the_same_local_sandbox(start_server, tmp_path, emulator):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    one, two = await _takeover(
        start_server, mesh, LOCAL, "echo kept > note.txt; sleep 1; pwd", "cat note.txt; pwd"
    )
    assert "kept" in two and one.split()[-1] == two.split()[-1], (one, two)


@pytest.mark.slow
async def test_a_takeover_continues_in_the_same_container(start_server, tmp_path, emulator):
    problem = await asyncio.to_thread(docker_problem)
    if problem:
        unavailable(problem)
    owner = f"agentrt-test-{os.urandom(4).hex()}"
    mesh = await start_mesh(
        start_server,
        tmp_path,
        emulator,
        lease_seconds=0.6,
        replica_id="replica-a",
        tools_kw={"docker": DockerSettings(owner=owner)},
    )
    try:
        one, two = await _takeover(
            start_server, mesh, DOCKER, "echo kept > /tmp/note; sleep 1; hostname", "cat /tmp/note; hostname"
        )
        assert "kept" in two and one.split()[-1] == two.split()[-1], (one, two)
        assert await asyncio.to_thread(owned_containers, owner) == []
    finally:
        await asyncio.to_thread(remove_owned, owner)


async def test_a_drain_during_the_model_call_of_a_sandboxed_run_asks_the_model_once(
    start_server, tmp_path, emulator
):
    """The drain lets the model call finish; its response is logged before the sandbox is
    asked for, so the replica that continues runs the call in the sandbox, never asking again."""
    from tests.service.runs.test_runs_takeover import until

    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    slow = Reply(text="x" * 60, tool_calls=[sh('echo "in=$WHERE"')], chunk_chars=2, event_delay=0.02)

    def by_turn(path, body):
        return Reply(text="after the drain") if "function_call_output" in json.dumps(body) else slow

    emulator.responder = by_turn
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL, env={"WHERE": "the-sandbox"}),
        ),
    )

    async def asked() -> bool:
        return len(emulator.requests) >= 1

    await until(asked, "the model call to be in flight")
    await mesh.runs_server.manager.stop(10)  # type: ignore[attr-defined]
    replica_b, stub = await start_replica(mesh, start_server)

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    turns = ["function_call_output" in json.dumps(b) for _, b in emulator.requests]
    assert turns == [False, True]  # turn 1 once (finished during the drain), turn 2 once
    assert ["in=the-sandbox" in out for out in await outputs(mesh, started.session_id)] == [True]
    await released(mesh, started.sandbox_id)


async def test_a_release_the_tool_service_missed_is_retried_once_it_is_back(start_server, tmp_path, emulator):
    # The run ends while the tool service is down: the end is stored all the same, the
    # release is remembered, and the lease loop's retry destroys the sandbox once it serves.
    from agentrt.mesh.config import ServerConfig
    from agentrt.mesh.storage.db import sqlite_url
    from agentrt.tools.config import ToolsConfig
    from agentrt.tools.server import build_server as build_tools

    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, peer_unavailable_seconds=0.3)
    mine = pb.AgentTool(name="mine", spec=cpb.ToolSpec(external=True, description="the client's"))
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo ran")]),
            Reply(tool_calls=[ToolCallReply("mine", "{}")]),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command"), mine]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL),
        ),
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)  # waits on the client's tool
    assert (await sandbox_state(mesh, started.sandbox_id)).state == RUNNING
    await mesh.tools_server.stop(grace=0)  # type: ignore[attr-defined]
    result = cpb.ToolResult(call_id=run.pending_calls[0].call.call_id, name="mine", content="42")
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, results=[result]))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    releases = mesh.runs_server.manager.deps.releases  # type: ignore[attr-defined]

    async def pending() -> bool:
        return started.sandbox_id in releases.pending

    from tests.service.runs.test_runs_takeover import until

    await until(pending, "the missed release to be remembered")
    port = int(mesh.addresses["tools"].rsplit(":", 1)[1])
    await start_server(
        build_tools(
            ToolsConfig(
                server=ServerConfig(port=port, db_url=sqlite_url(mesh.tmp, "tools"), state_dir=mesh.tmp),
                workspace_root=mesh.workspace_root,
                heartbeat_seconds=0.5,
            )
        )
    )
    await released(mesh, started.sandbox_id)
    await until(lambda: asyncio.sleep(0, not releases.pending), "the retry to forget it")


@pytest.mark.parametrize("how", ["stopped", "destroyed"])
async def test_a_sandbox_lost_behind_the_runs_back_is_asked_for_again(mesh, how):
    # Between two tool turns of one executor, someone stops (or destroys) the run's sandbox:
    # the next call is refused before anything runs, the run asks for the sandbox again
    # (resumed: its files kept; recreated: a fresh workspace) and sends the call once more.
    from tests.service.runs.test_runs_takeover import until

    slow_second = Reply(tool_calls=[sh("cat note.txt || echo no-note; pwd")], chunk_chars=2, event_delay=0.02)
    slow_second.text = "y" * 40

    def by_turn(path, body):
        done = json.dumps(body).count("function_call_output")
        if done == 0:
            return Reply(tool_calls=[sh("echo kept > note.txt")])
        return slow_second if done == 1 else Reply(text="done")

    mesh.emu.responder = by_turn
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL),
        ),
    )

    async def second_turn_asked() -> bool:
        return len(mesh.emu.requests) >= 2

    await until(second_turn_asked, "the second model call to be in flight")
    stub = tools(mesh)
    if how == "stopped":
        await stub.StopSandbox(tpb.StopSandboxRequest(sandbox_id=started.sandbox_id))
    else:
        await stub.DestroySandbox(tpb.DestroySandboxRequest(sandbox_id=started.sandbox_id))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    first, second = await outputs(mesh, started.session_id)
    assert "refused this call" not in second, second
    assert os.path.join("sandboxes", started.sandbox_id) in second, second
    assert ("kept" in second) == (how == "stopped"), second  # a stopped sandbox keeps its files
    await released(mesh, started.sandbox_id)
