"""A run whose only tool service drains and comes back on the same port (decision 0062).

The run keeps a stream of calls to its tool service. SIGTERM's drain (MeshServer.stop) ends
that stream once the call it took has answered; the run sends its next call on a new stream,
which waits for a tool service to serve again. Production servers in this process on
127.0.0.1; commands in the real local sandbox, each appending a line, so a call run twice or
lost shows in the file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

from agentrt.tools.server import build_server as build_tools
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent, start_mesh
from tests.service.runs.test_runs_takeover import until

TURNS = 4


async def test_a_run_carries_on_when_its_only_tool_service_drains_and_comes_back(
    start_server, tmp_path, emulator
):
    mesh = await start_mesh(start_server, tmp_path, emulator)
    workspace = tmp_path / "work" / "drain"
    lines = workspace / "lines.txt"

    def call(i: int) -> Reply:
        cmd = f"echo turn{i} >> {lines}; sleep 0.3; echo done{i}"
        return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])

    emulator.script([*(call(i) for i in range(TURNS)), Reply(text="carried on")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace=str(workspace))
    )

    async def first_line() -> bool:
        return lines.exists() and "turn0" in lines.read_text()

    await until(first_line, "the first command to run")
    port = mesh.tools_server.port
    await mesh.tools_server.stop(grace=30)  # SIGTERM's drain: the call it took answers first
    # The drain ended when that call answered, not when the grace ran out with the run's
    # stream still open and its later calls taken by the draining server.
    during = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert during.status == cpb.RUN_STATUS_RUNNING and len(lines.read_text().split()) < TURNS
    await asyncio.sleep(0.5)  # the run's next call finds no tool service for a while
    config = mesh.tools_config
    again = build_tools(dataclasses.replace(config, server=dataclasses.replace(config.server, port=port)))
    await start_server(again)

    async def finished() -> bool:
        run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status != cpb.RUN_STATUS_RUNNING

    await until(finished, "the run to end")
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "carried on"
    assert lines.read_text().split() == [f"turn{i}" for i in range(TURNS)]  # each command once
