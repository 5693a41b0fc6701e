"""The tool service's stop gives its commands the operator's drain (AGENTRT_DRAIN_SECONDS).

A command in flight when the service stops, its caller gone (a runs replica that abandoned the
call, which runs on, journaled), gets what is left of the drain counted from the stop, not a
fixed time of the executor's own: one that ends within the drain is journaled with its own
result; one that outlives it is killed and journaled INTERRUPTED (SERVICE_STOPPED). The journal
is read back by a second service on the same state directory.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from tools_helpers import ToolsEnv, make_config, until

from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

#: The executor's fixed close grace before the fix, seconds: the first command outlives it.
OLD_CLOSE_GRACE_S = 5.0


def _config(tmp_path: Path, drain_s: float):
    config = make_config(tmp_path)
    return replace(config, server=replace(config.server, grace_seconds=drain_s))


async def _stopped_with_a_detached_command(start_server, tmp_path: Path, drain_s: float, cmd: str):
    """Start `cmd` as call `c_drain`, let its caller go away, stop the service; return its record."""
    config = _config(tmp_path, drain_s)
    server = build_server(config)
    address = await start_server(server)
    async with grpc.aio.insecure_channel(address) as channel:
        tools = ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws")
        call = tools.stub.ExecuteTool(
            tools.request("exec_command", {"cmd": cmd}, call_id="c_drain", timeout=60)
        )

        async def running() -> bool:
            got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_drain"))
            return got.state == pb.EXECUTION_STATE_STARTED and (tools.workspace / "began").exists()

        await until(running, "the command to run")
        call.cancel()  # the caller goes away: the command runs on, detached
        with pytest.raises(asyncio.CancelledError):
            await call
    await server.stop()  # the configured drain (grace None)
    again = build_server(config)  # the same state directory and journal
    async with grpc.aio.insecure_channel(await start_server(again)) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        return await stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_drain"))


async def test_a_command_within_the_drain_finishes_and_is_journaled(start_server, tmp_path):
    # It outlives the executor's old fixed 5 s but not the 60 s drain the operator configured.
    cmd = f"touch began; sleep {OLD_CLOSE_GRACE_S + 1:g}; echo finished"
    got = await _stopped_with_a_detached_command(start_server, tmp_path, 60.0, cmd)
    assert got.state == pb.EXECUTION_STATE_FINISHED, got
    assert got.result.status == common_pb2.TOOL_RESULT_STATUS_OK, got.result
    assert "finished" in got.result.content and not got.result.is_error, got.result


async def test_a_command_outliving_the_drain_is_ended_and_journaled_interrupted(start_server, tmp_path):
    # A drain shorter than the old fixed 5 s, and a command between the two: ended at the drain.
    cmd = f"touch began; sleep {OLD_CLOSE_GRACE_S - 1:g}; echo finished"
    got = await _stopped_with_a_detached_command(start_server, tmp_path, 0.2, cmd)
    assert got.state == pb.EXECUTION_STATE_FINISHED, got
    assert got.result.status == common_pb2.TOOL_RESULT_STATUS_INTERRUPTED, got.result
    assert json.loads(got.result.details_json)["reason"] == "SERVICE_STOPPED", got.result
    assert "finished" not in got.result.content
