"""Tool-call arguments against the tool's whole schema, defaults applied (004 §2.7h)."""

from __future__ import annotations

import json

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "units": {"type": "string", "enum": ["metric", "imperial"], "default": "metric"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
    },
    "required": ["city"],
}


def weather() -> pb.AgentTool:
    spec = cpb.ToolSpec(external=True, description="weather", parameters_json_schema=json.dumps(SCHEMA))
    return pb.AgentTool(name="weather", spec=spec)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_bad_arguments_are_fed_back_with_their_pointer_and_defaults_are_applied(mesh, provider):
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("weather", '{"city": "Oslo", "where": {"lat": "north"}}')]),
            Reply(tool_calls=[ToolCallReply("weather", '{"city": "Oslo"}')]),
            Reply(text="sunny"),
        ]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(provider, tools=[weather()]), input="w?")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    # the first call never waited: it was refused with the problem's JSON pointer
    first = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert len(first) == 1 and first[0].is_error and "/where/lat" in first[0].content
    assert "/where/lat" in json.dumps(mesh.emu.requests[-1][1])  # the model read it
    call = run.pending_calls[0].call
    assert json.loads(call.arguments) == {"city": "Oslo", "units": "metric"}  # the default, filled in
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(run_id=run.run_id, results=[cpb.ToolResult(call_id=call.call_id, content="21C")])
    )
    done = await mesh.wait_status(run.run_id, cpb.RUN_STATUS_COMPLETED)
    assert done.final_output == "sunny"


async def test_a_catalog_tool_call_missing_a_required_argument_does_not_run(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("read_file", "{}")]), Reply(text="ok")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(tools=[pb.AgentTool(name="read_file")]), input="read")
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].is_error and "do not match the tool's parameter schema" in results[0].content
    assert results[0].details_json == '{"source": "runtime"}'  # answered by the runtime, never ran
