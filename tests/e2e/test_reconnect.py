"""`follow_run` survives a broken event stream: it reopens it from the last seq it saw.

The connection is cut by a TCP proxy between the client and the real RunService, while the
run is suspended for an approval; the stream must resume without losing or repeating events.
"""

from __future__ import annotations

import asyncio
import io

import pytest
from e2e_helpers import STATE_TIMEOUT, CuttableProxy
from rich.console import Console

from agentrt.cli.run import build_agent, follow_run
from agentrt.client.channels import MeshClient
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = pytest.mark.slow


async def test_follow_run_reconnects_after_the_stream_breaks(emulated_mesh, tmp_path):
    emulated_mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo x > x.txt"}')]),
            Reply(text="all done"),
        ]
    )
    proxy = CuttableProxy(emulated_mesh.runs)
    address = await proxy.start()
    agent = build_agent(cpb.ModelRef(provider="openai", model="gpt-test"), max_turns=4)
    del agent.tools[:]
    agent.tools.add(name="exec_command", needs_approval=True)

    async def approve_after_cutting(call: cpb.ToolCall) -> tuple[bool, str]:
        proxy.cut()  # the open StreamRunEvents call breaks here
        return True, ""

    screen = io.StringIO()
    client = MeshClient(runs=address)
    try:
        request = pb.StartRunRequest(agent=agent, input="go", workspace=str(tmp_path / "ws"))
        outcome = await asyncio.wait_for(
            follow_run(client, request, Console(file=screen, width=120), approve_after_cutting), STATE_TIMEOUT
        )
    finally:
        await client.close()
        await proxy.close()

    assert outcome.completed and outcome.run.final_output == "all done", screen.getvalue()
    assert "retrying after seq" in screen.getvalue()
    assert proxy.connections >= 2
    seqs = [e.seq for e in outcome.events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # nothing lost, nothing repeated
    kinds = [e.WhichOneof("payload") for e in outcome.events]
    assert kinds.count("run_suspended") == 1 and kinds[-1] == "stream_end"
    assert (tmp_path / "ws" / "x.txt").read_text() == "x\n"
