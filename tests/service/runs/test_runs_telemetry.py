"""The run loop's spans and series over the in-process mesh (the four production servers).

Tracing is on (the SDK's in-memory exporter, tests/tracing.py) before the mesh starts, so
every server's interceptors and every peer channel trace, and the spans of all four
services land in one exporter, where the parent-child shape can be checked whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply
from tests.service.runs.harness import Mesh, agent, start_mesh
from tests.tracing import Recorded, recorded

SECRET_PROMPT = "write the secret-prompt file"
SECRET_ANSWER = "the secret-answer is written"


@pytest.fixture(params=[False, True], ids=["default", "content"])
async def traced(
    request, start_server, tmp_path, emulator: ProviderEmulator
) -> AsyncIterator[tuple[Mesh, Recorded, bool]]:
    with recorded(content=request.param) as rec:
        mesh = await start_mesh(start_server, tmp_path, emulator)
        yield mesh, rec, request.param


def _parent(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    found = by_id.get(span.parent.span_id)
    assert found is not None, f"{span.name}: its parent is not recorded"
    return found


def _chain(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    """The span's ancestors' names, nearest first."""
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def test_a_run_is_one_trace_of_run_turn_generation_and_tool_spans(traced):
    mesh, rec, content = traced
    mesh.emu.script(
        [
            Reply(
                text="On it.",
                tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo hi > out.txt"}))],
            ),
            Reply(text=SECRET_ANSWER, input_tokens=40, output_tokens=7),
        ]
    )
    workspace = os.path.join(mesh.work, "t")
    spec = agent(name="tracer")
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=spec, input=SECRET_PROMPT, workspace=workspace)
    )
    await mesh.events(started.run_id)
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    runs_server = mesh.runs_server
    await runs_server.manager.wait_idle(started.run_id)  # type: ignore[attr-defined]

    spans = rec.spans
    by_id = {s.context.span_id: s for s in spans}
    run_span = rec.named("invoke_agent tracer")
    assert {s.context.trace_id for s in spans if s.name != "grpc.health.v1.Health/Check"} >= {
        run_span.context.trace_id
    }
    attrs = dict(run_span.attributes or {})
    assert attrs["agentrt.run.id"] == started.run_id and attrs["gen_ai.conversation.id"] == run.session_id
    assert attrs["agentrt.run.status"] == "completed"
    assert _parent(run_span, by_id).name == "agentrt.v1.RunService/StartRun"
    turns = sorted((s for s in spans if s.name.startswith("turn ")), key=lambda s: s.name)
    assert [t.name for t in turns] == ["turn 1", "turn 2"]
    assert all(_parent(t, by_id) is run_span for t in turns)

    generations = [s for s in spans if s.name == "chat gpt-test" and s.kind == SpanKind.INTERNAL]
    assert len(generations) == 2
    for gen in generations:
        assert _parent(gen, by_id).name.startswith("turn ")
    last = max(generations, key=lambda s: s.start_time or 0)
    gen_attrs = dict(last.attributes or {})
    assert (gen_attrs["gen_ai.usage.input_tokens"], gen_attrs["gen_ai.usage.output_tokens"]) == (40, 7)
    assert gen_attrs["gen_ai.response.id"] and gen_attrs["gen_ai.request.model"] == "gpt-test"
    # the model call crosses to the gateway: RPC client → gateway server → provider CLIENT span
    provider_calls = [s for s in spans if s.name == "chat gpt-test" and s.kind == SpanKind.CLIENT]
    assert len(provider_calls) == 2
    for call in provider_calls:
        assert _chain(call, by_id)[:4] == [
            "agentrt.v1.ModelGatewayService/StreamGenerate",  # the gateway's SERVER span
            "agentrt.v1.ModelGatewayService/StreamGenerate",  # the runs replica's CLIENT span
            "chat gpt-test",  # the generation
            _chain(call, by_id)[3],
        ]
        assert _chain(call, by_id)[3].startswith("turn ")
        assert dict(call.attributes or {})["gen_ai.response.id"] in {
            dict(g.attributes or {})["gen_ai.response.id"] for g in generations
        }

    # the tool call: runs' span → ExecuteTool → the tools service's span → its sandbox command
    commands = [s for s in spans if s.name == "sandbox command"]
    assert len(commands) == 1
    chain = _chain(commands[0], by_id)
    assert chain[0] == "execute_tool exec_command"  # tools
    assert chain[1].startswith("agentrt.v1.ToolService/") and chain[2] == chain[1]  # server, client
    assert chain[3] == "execute_tool exec_command"  # runs
    assert chain[4] == "turn 1" and chain[5] == "invoke_agent tracer"
    runs_tool = by_id[_parent(_parent(_parent(commands[0], by_id), by_id), by_id).parent.span_id]  # type: ignore[union-attr]
    assert dict(runs_tool.attributes or {})["agentrt.tool.outcome"] == "ok"
    assert (
        dict(runs_tool.attributes or {})["gen_ai.tool.call.id"]
        == dict(commands[0].attributes or {})["gen_ai.tool.call.id"]
    )
    # the session calls of the run are in its trace too (a run on the session it created
    # reads no context: decision 0058)
    session_rpcs = {
        s.name for s in spans if s.name.startswith("agentrt.v1.SessionService/") and s.kind == SpanKind.SERVER
    }
    run_calls = {"agentrt.v1.SessionService/AppendEntries", "agentrt.v1.SessionService/CreateSession"}
    assert run_calls <= session_rpcs

    # conversation content: absent by default, present with the opt-in (004 §2.11c)
    everything = " ".join(str(dict(s.attributes or {})) for s in spans)
    for words in (SECRET_PROMPT, SECRET_ANSWER, "echo hi > out.txt"):
        assert (words in everything) is content, words
    if content:
        assert SECRET_PROMPT in str(
            dict(generations[0].attributes or {}).get("gen_ai.input.messages", "")
        ) or SECRET_PROMPT in str(dict(generations[1].attributes or {}).get("gen_ai.input.messages", ""))
        assert SECRET_ANSWER in str(gen_attrs["gen_ai.output.messages"])

    # the run's series, on the replica's registry
    registry = runs_server.registry  # type: ignore[attr-defined]
    assert registry.get_sample_value("agentrt_runs_started_total") == 1
    assert registry.get_sample_value("agentrt_runs_finished_total", {"status": "completed"}) == 1
    assert registry.get_sample_value("agentrt_runs_turns_total") == 2
    assert registry.get_sample_value("agentrt_runs_running") == 0
    assert registry.get_sample_value("agentrt_runs_tool_queue_wait_seconds_count") == 1


async def test_store_gauges_count_suspended_runs_and_pending_approvals(mesh):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", json.dumps({"cmd": "echo a"})),
                    ToolCallReply("exec_command", json.dumps({"cmd": "echo b"})),
                ]
            )
        ]
    )
    spec = agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=spec, input="go", workspace=os.path.join(mesh.work, "g"))
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    manager = mesh.runs_server.manager  # type: ignore[attr-defined]
    await manager.observe_store()
    registry = mesh.runs_server.registry  # type: ignore[attr-defined]
    assert registry.get_sample_value("agentrt_runs_suspended") == 1
    assert registry.get_sample_value("agentrt_runs_pending_approvals") == 2
    assert registry.get_sample_value("agentrt_runs_waiting_for_replica") == 0
    assert registry.get_sample_value("agentrt_runs_running") == 0  # a suspended run holds no executor


async def test_a_resumed_run_continues_the_trace_it_was_started_in(start_server, tmp_path, emulator):
    with recorded() as rec:
        mesh = await start_mesh(start_server, tmp_path, emulator)
        mesh.emu.script(
            [
                Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "true"}))]),
                Reply(text="done"),
            ]
        )
        spec = agent(name="paused", tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
        workspace = os.path.join(mesh.work, "p")
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go", workspace=workspace))
        run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
        call_id = run.pending_calls[0].call.call_id
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(
                run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
            )
        )
        await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
        await mesh.runs_server.manager.wait_idle(started.run_id)  # type: ignore[attr-defined]
        spans = rec.spans
    segments = sorted((s for s in spans if s.name == "invoke_agent paused"), key=lambda s: s.start_time or 0)
    assert len(segments) == 2
    first, second = segments
    assert first.context.trace_id == second.context.trace_id
    start_rpc = next(
        s for s in spans if s.name == "agentrt.v1.RunService/StartRun" and s.kind == SpanKind.SERVER
    )
    resume_rpc = next(
        s for s in spans if s.name == "agentrt.v1.RunService/ResumeRun" and s.kind == SpanKind.SERVER
    )
    assert first.parent is not None and second.parent is not None
    assert first.parent.span_id == second.parent.span_id == start_rpc.context.span_id
    assert [link.context.span_id for link in second.links] == [resume_rpc.context.span_id]
    assert dict(first.attributes or {})["agentrt.run.status"] == "suspended"
    assert dict(second.attributes or {})["agentrt.run.status"] == "completed"
