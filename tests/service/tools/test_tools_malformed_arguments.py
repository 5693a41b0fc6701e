"""Arguments JSON cannot hold, or that nest too deep to read, are a result the model can correct.

Python's `json.loads` reads NaN, Infinity and -Infinity (and `1e999` as infinity), none of
which is JSON; and it raises RecursionError on arguments nested deeper than the interpreter's
recursion limit. Either used to slip past `calls/args.decode_object`: a non-finite number
reached the tool, and deep nesting answered INTERNAL "internal error" for every tool. Both
are now the INVALID_ARGUMENTS error result of any other malformed arguments, and the call
never runs.
"""

from __future__ import annotations

import json

import pytest

from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

#: Deeper than Python's recursion limit, at the top and inside an otherwise valid object.
DEEP = "[" * 100_000 + "]" * 100_000
DEEP_IN_OBJECT = '{"cmd": "true", "x": ' + "[" * 5_000 + "]" * 5_000 + "}"
TOOLS = ["exec_command", "read_file", "write_file", "list_files", "apply_patch"]


def _is_invalid_arguments(result: common_pb2.ToolResult) -> bool:
    return (
        result.is_error
        and result.status == common_pb2.TOOL_RESULT_STATUS_ERROR
        and json.loads(result.details_json)["reason"] == "INVALID_ARGUMENTS"
    )


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("arguments", [DEEP, DEEP_IN_OBJECT], ids=["deep-array", "deep-in-object"])
async def test_deeply_nested_arguments_are_an_error_result_not_internal(tools, tool, arguments):
    call = common_pb2.ToolCall(call_id="c_deep", name=tool, arguments=arguments)
    resp = await tools.stub.ExecuteTool(
        pb.ExecuteToolRequest(run_id="r1", call=call, workspace=str(tools.workspace))
    )  # before the fix: grpc.aio.AioRpcError INTERNAL 'internal error'
    assert resp.result.is_error and resp.result.status == common_pb2.TOOL_RESULT_STATUS_ERROR
    assert json.loads(resp.result.details_json)["reason"] == "INVALID_ARGUMENTS"
    assert not (await tools.sh("echo still-serving")).is_error


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
async def test_a_call_whose_arguments_hold_a_non_finite_number_never_runs(tools, number):
    arguments = '{"cmd": "touch ran", "timeout_ms": ' + number + "}"
    resp = await tools.run("exec_command", arguments, call_id=f"c_{number.strip('-')}")
    assert _is_invalid_arguments(resp.result), resp.result.content
    assert "not valid JSON" in resp.result.content
    assert not (tools.workspace / "ran").exists()


@pytest.mark.parametrize("tool", ["read_file", "write_file", "list_files"])
async def test_every_tool_refuses_a_non_finite_number(tools, tool):
    arguments = '{"path": "x.txt", "content": "", "offset": NaN}'
    resp = await tools.run(tool, arguments, call_id=f"c_nan_{tool}")
    assert _is_invalid_arguments(resp.result), resp.result.content
    assert not (tools.workspace / "x.txt").exists()
