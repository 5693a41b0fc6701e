"""Structured output on every provider, and tools only when asked for (004 §2.3; decision 0006).

Against the wire emulator on OpenAI Responses (which cannot combine tools with a response
format: the final-output tool) and Anthropic (the native format next to the tools).
"""

from __future__ import annotations

import json

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
)
READ = [pb.AgentTool(name="read_file")]
PROVIDERS = ["openai", "anthropic"]


def tool_names(body: dict) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or []]


def response_format(provider: str, body: dict) -> object:
    if provider == "openai":
        return (body.get("text") or {}).get("format")
    return (body.get("output_config") or {}).get("format")


def model_requests(mesh) -> list[dict]:
    return [body for path, body in mesh.emu.requests if path.endswith(("/responses", "/messages"))]


async def run_to_end(mesh, spec: pb.AgentSpec, text: str = "go") -> pb.Run:
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input=text))
    return await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)


async def results_of(mesh, session_id: str) -> list[cpb.ToolResult]:
    return [e.item.tool_result for e in await mesh.entries(session_id) if e.item.HasField("tool_result")]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_spec_with_no_tools_is_offered_no_tools(mesh, provider):
    mesh.emu.script([Reply(text="hello")])
    run = await run_to_end(mesh, agent(provider, tools=[]))
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "hello"
    assert tool_names(model_requests(mesh)[0]) == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_default_tools_are_offered_when_asked_for_once_each(mesh, provider):
    mesh.emu.script([Reply(text="hello")])
    await run_to_end(mesh, agent(provider, tools=READ, default_tools=True))
    names = tool_names(model_requests(mesh)[0])
    assert sorted(names) == sorted(["read_file", "exec_command", "write_file", "list_files"])


async def test_structured_output_with_tools_on_openai_uses_the_final_output_tool(mesh):
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("read_file", '{"path": "missing.txt"}')]),
            Reply(tool_calls=[ToolCallReply("final_output", '{"n": 3}')]),
        ]
    )
    run = await run_to_end(mesh, agent("openai", tools=READ, output_json_schema=SCHEMA))
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert json.loads(run.final_output) == {"n": 3}
    first = model_requests(mesh)[0]
    assert tool_names(first) == ["read_file", "final_output"] and response_format("openai", first) is None
    results = await results_of(mesh, run.session_id)
    assert [r.name for r in results] == ["read_file", "final_output"]
    assert results[-1].content == "Final output accepted." and not results[-1].is_error


async def test_structured_output_with_tools_on_anthropic_uses_the_native_format(mesh):
    mesh.emu.script([Reply(text='{"n": 4}')])
    run = await run_to_end(mesh, agent("anthropic", tools=READ, output_json_schema=SCHEMA))
    assert run.status == cpb.RUN_STATUS_COMPLETED and json.loads(run.final_output) == {"n": 4}
    first = model_requests(mesh)[0]
    assert tool_names(first) == ["read_file"] and response_format("anthropic", first)["type"] == "json_schema"


async def test_a_non_object_schema_is_wrapped_by_the_final_output_tool(mesh):
    schema = json.dumps({"type": "array", "items": {"type": "integer"}})
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("final_output", '{"output": [1, 2]}')])])
    run = await run_to_end(mesh, agent("openai", tools=READ, output_json_schema=schema))
    assert run.status == cpb.RUN_STATUS_COMPLETED and json.loads(run.final_output) == [1, 2]
    offered = [t for t in model_requests(mesh)[0]["tools"] if t["name"] == "final_output"][0]
    assert offered["parameters"]["required"] == ["output"]


async def test_final_output_alongside_other_calls_is_answered_and_the_others_run(mesh):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("read_file", '{"path": "missing.txt"}'),
                    ToolCallReply("final_output", '{"n": 1}'),
                ]
            ),
            Reply(tool_calls=[ToolCallReply("final_output", '{"n": 2}')]),
        ]
    )
    run = await run_to_end(mesh, agent("openai", tools=READ, output_json_schema=SCHEMA))
    assert run.status == cpb.RUN_STATUS_COMPLETED and json.loads(run.final_output) == {"n": 2}
    results = await results_of(mesh, run.session_id)
    assert [r.name for r in results] == ["read_file", "final_output", "final_output"]
    assert "call final_output again by itself" in results[1].content and results[1].is_error


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_rejected_answer_gets_one_tool_free_recovery_turn_then_fails(mesh, provider):
    bad = (
        Reply(tool_calls=[ToolCallReply("final_output", '{"n": "three"}')])
        if provider == "openai"
        else Reply(text='{"n": "three"}')
    )
    mesh.emu.script([bad, Reply(text='{"n": "still three"}')])
    run = await run_to_end(mesh, agent(provider, tools=READ, output_json_schema=SCHEMA))
    assert run.status == cpb.RUN_STATUS_FAILED
    assert run.failure.kind == "invalid_final_output"
    assert json.loads(run.failure.details_json)["pointer"] == "/n"
    requests = model_requests(mesh)
    assert len(requests) == 2  # exactly one recovery turn
    recovery = requests[1]
    assert "/n" in json.dumps(recovery)  # the validation error with its JSON pointer
    assert response_format(provider, recovery) is not None  # tool-free turns are NATIVE
    if provider == "openai":
        assert tool_names(recovery) == []  # no tools next to the format
    else:
        assert recovery["tool_choice"] == {"type": "none"}  # declared, not callable


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_recovery_turn_can_fix_the_answer(mesh, provider):
    mesh.emu.script([Reply(text="not json at all"), Reply(text='{"n": 5}')])
    run = await run_to_end(mesh, agent(provider, tools=[], output_json_schema=SCHEMA))
    assert run.status == cpb.RUN_STATUS_COMPLETED and json.loads(run.final_output) == {"n": 5}
    entries = await mesh.entries(run.session_id)
    prompts = [e for e in entries if e.display.title == "recovery"]
    assert len(prompts) == 1 and "not valid JSON" in prompts[0].item.message.content[0].text.text
    assert [d.code for d in run.diagnostics] == ["final_output_rejected"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_refusal_wins_over_the_schema(mesh, provider):
    mesh.emu.script([Reply(text="I will not answer that.", stop="refusal")])
    run = await run_to_end(mesh, agent(provider, tools=READ, output_json_schema=SCHEMA))
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "refusal"
    assert len(model_requests(mesh)) == 1
