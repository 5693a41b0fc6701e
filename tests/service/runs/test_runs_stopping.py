"""Stopping early and the error handlers over the real mesh (004 §2.3c, §2.7b, §2.7d, §2.10)."""

from __future__ import annotations

import json

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

PROVIDERS = ["openai", "anthropic"]
READ = [pb.AgentTool(name="read_file")]
EH, FB = pb.ErrorHandlers, pb.ERROR_HANDLER_ACTION_FALLBACK


def model_requests(mesh) -> list[dict]:
    return [body for path, body in mesh.emu.requests if path.endswith(("/responses", "/messages"))]


async def run_to_end(mesh, spec: pb.AgentSpec, text: str = "go") -> pb.Run:
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input=text))
    return await mesh.wait_status(
        started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_SUSPENDED
    )


def read(path: str = "missing.txt") -> Reply:
    return Reply(tool_calls=[ToolCallReply("read_file", json.dumps({"path": path}))])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_final_turn_without_tools_buys_one_tool_free_closing_call(mesh, provider):
    mesh.emu.script([read(), Reply(text="Here is what I found.")])
    spec = agent(provider, tools=READ, limits=pb.AgentLimits(max_turns=1), final_turn_without_tools=True)
    run = await run_to_end(mesh, spec)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "Here is what I found." and run.turns == 2
    closing = model_requests(mesh)[1]
    assert closing["tool_choice"] in ("none", {"type": "none"})  # nothing callable


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_closing_call_is_made_once_then_max_turns_fails(mesh, provider):
    mesh.emu.script([read(), read(), Reply(text="never asked")])
    spec = agent(provider, tools=READ, limits=pb.AgentLimits(max_turns=1), final_turn_without_tools=True)
    run = await run_to_end(mesh, spec)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "max_turns"
    assert len(model_requests(mesh)) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_max_turns_fallback_completes_the_run(mesh, provider):
    mesh.emu.script([read()])
    handlers = EH(max_turns=pb.ErrorHandler(action=FB, fallback_message="Out of turns, sorry."))
    spec = agent(provider, tools=READ, limits=pb.AgentLimits(max_turns=1), error_handlers=handlers)
    run = await run_to_end(mesh, spec)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "Out of turns, sorry."


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_refusal_fallback_completes_the_run(mesh, provider):
    mesh.emu.script([Reply(text="No.", stop="refusal")])
    handlers = EH(refusal=pb.ErrorHandler(action=FB, fallback_message="I cannot help with that."))
    run = await run_to_end(mesh, agent(provider, tools=[], error_handlers=handlers))
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "I cannot help with that."


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_invalid_final_output_fallback_completes_after_the_recovery_turn(mesh, provider):
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    mesh.emu.script([Reply(text="nope"), Reply(text="still nope")])
    handlers = EH(invalid_final_output=pb.ErrorHandler(action=FB, fallback_message='{"n": 0}'))
    spec = agent(provider, tools=[], output_json_schema=schema, error_handlers=handlers)
    run = await run_to_end(mesh, spec)
    assert run.status == cpb.RUN_STATUS_COMPLETED and json.loads(run.final_output) == {"n": 0}
    assert len(model_requests(mesh)) == 2


def client_tool(name: str) -> pb.AgentTool:
    spec = cpb.ToolSpec(external=True, description=name, parameters_json_schema='{"type": "object"}')
    return pb.AgentTool(name=name, spec=spec)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_run_stops_only_when_every_call_of_the_batch_asks(mesh, provider):
    two = Reply(tool_calls=[ToolCallReply("a", "{}"), ToolCallReply("b", "{}")])
    mesh.emu.script([two, two, Reply(text="unused")])
    spec = agent(provider, tools=[client_tool("a"), client_tool("b")])
    run = await run_to_end(mesh, spec)

    async def answer(run: pb.Run, terminate: tuple[bool, bool]) -> pb.Run:
        results = [
            cpb.ToolResult(call_id=p.call.call_id, content=f"{p.call.name} done", terminate=t)
            for p, t in zip(run.pending_calls, terminate, strict=True)
        ]
        await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run.run_id, results=results))
        return await mesh.wait_status(
            run.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED
        )

    run = await answer(run, (True, False))  # one asks, the other does not: the run goes on
    assert run.status == cpb.RUN_STATUS_SUSPENDED and run.turns == 1
    run = await answer(run, (True, True))
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "b done"
    assert len(model_requests(mesh)) == 2  # the terminating batch was not sent back to the model


async def test_a_terminating_catalog_tool_ends_the_run_with_its_output(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="unused")])
    run = await run_to_end(mesh, agent(tools=[pb.AgentTool(name="list_files", terminates_run=True)]))
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert len(model_requests(mesh)) == 1
    results = [
        e.item.tool_result for e in await mesh.entries(run.session_id) if e.item.HasField("tool_result")
    ]
    assert run.final_output == results[0].content  # the full history is saved


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_stop_after_turn_finishes_at_the_next_save_point_with_the_history_saved(mesh, provider):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("a", "{}")]), Reply(text="never asked")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(provider, tools=[client_tool("a")]), input="go")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    stopped = await mesh.runs.StopAfterTurn(pb.StopAfterTurnRequest(run_id=run.run_id, reason="enough"))
    assert stopped.run.stop_requested and stopped.run.status == cpb.RUN_STATUS_SUSPENDED
    assert list(stopped.run.pending_input) == []  # a stop is not input
    call = run.pending_calls[0].call
    result = cpb.ToolResult(call_id=call.call_id, content="the answer is 42")
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run.run_id, results=[result]))
    run = await mesh.wait_status(run.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "the answer is 42"
    assert len(model_requests(mesh)) == 1 and run.turns == 1
    results = [
        e.item.tool_result for e in await mesh.entries(run.session_id) if e.item.HasField("tool_result")
    ]
    assert [r.content for r in results] == ["the answer is 42"]  # the turn is saved in full
    events = await mesh.events(run.run_id)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.index("stop_requested") < kinds.index("run_completed")
    assert [e.stop_requested.reason for e in events if e.WhichOneof("payload") == "stop_requested"] == [
        "enough"
    ]
    assert not any(d.code == "injected_input_not_consumed" for d in run.diagnostics)
