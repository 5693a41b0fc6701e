"""Deferred tools: withheld until a tool result names them, cumulative, kept across resumes (004 §2.7i)."""

from __future__ import annotations

import json

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent


def model_requests(mesh) -> list[dict]:
    return [body for path, body in mesh.emu.requests if path.endswith(("/responses", "/messages"))]


def tool_names(body: dict) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or []]


def client_tool(name: str, *, deferred: bool = False) -> pb.AgentTool:
    spec = cpb.ToolSpec(external=True, description=name, parameters_json_schema='{"type": "object"}')
    return pb.AgentTool(name=name, spec=spec, deferred=deferred)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_result_discloses_deferred_tools_for_the_rest_of_the_run(mesh, provider):
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("list_files", "{}"), ToolCallReply("finder", "{}")]),
            Reply(tool_calls=[ToolCallReply("secret", "{}")]),
            Reply(text="done"),
        ]
    )
    tools = [
        client_tool("finder"),
        client_tool("secret", deferred=True),
        pb.AgentTool(name="list_files", deferred=True),
    ]
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(provider, tools=tools), input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert tool_names(model_requests(mesh)[0]) == ["finder"]  # deferred tools are withheld
    finder = run.pending_calls[0].call
    result = cpb.ToolResult(call_id=finder.call_id, content="found one", added_tools=["secret", "nope"])
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run.run_id, results=[result]))
    run = await mesh.wait_status(run.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_SUSPENDED and run.pending_calls[0].call.name == "secret"
    assert list(run.disclosed_tools) == ["secret"]
    assert tool_names(model_requests(mesh)[1]) == ["finder", "secret"]
    results = [
        e.item.tool_result for e in await mesh.entries(run.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].name == "list_files" and "not found" in results[0].content  # not callable before
    call = run.pending_calls[0].call
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(run_id=run.run_id, results=[cpb.ToolResult(call_id=call.call_id, content="x")])
    )
    done = await mesh.wait_status(run.run_id, cpb.RUN_STATUS_COMPLETED)
    assert done.final_output == "done" and list(done.disclosed_tools) == ["secret"]
    assert tool_names(model_requests(mesh)[2]) == ["finder", "secret"]  # cumulative
    events = await mesh.events(run.run_id)
    disclosed = [e.tools_disclosed for e in events if e.WhichOneof("payload") == "tools_disclosed"]
    assert [(d.call_id, list(d.names)) for d in disclosed] == [(finder.call_id, ["secret"])]
    assert json.dumps(list(done.disclosed_tools)) == '["secret"]'
