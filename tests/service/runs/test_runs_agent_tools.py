"""Agents as tools over the real mesh on both providers (004 §2.8, §2.2 step 6, §2.7f; 002 run tree).

A parent's call of an AgentTool naming a registered agent starts a child run (its own id and
hidden session, linked both ways); the child's final output is the call's result, its usage
folds into the parent's total and nested usage, its progress reaches the parent's stream;
an approval inside the child suspends both, answered through either (decision 0018).
"""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest

from agentrt.mesh.status import details_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

PROVIDERS = ["openai", "anthropic"]
DONE = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)


def kinds(events: list[pb.RunEvent]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


async def register(mesh, provider: str, child_tools: list[pb.AgentTool], **parent_kw) -> None:
    helper = agent(provider, name="helper", instructions="You are the helper.", tools=child_tools)
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    tools = [pb.AgentTool(name="ask_helper", agent_name="helper"), *parent_kw.pop("tools", [])]
    boss = agent(provider, name="boss", instructions="You are the boss.", tools=tools, **parent_kw)
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))


def ask(text: str) -> ToolCallReply:
    return ToolCallReply("ask_helper", json.dumps({"input": text}))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_parent_completes_with_its_child_agents_answer(mesh, provider):
    await register(mesh, provider, [pb.AgentTool(name="write_file")])
    write = ToolCallReply("write_file", json.dumps({"path": "note.txt", "content": "hi"}))
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("write a note")], input_tokens=100, output_tokens=10),
            Reply(tool_calls=[write], input_tokens=40, output_tokens=4),  # the child's turn 1
            Reply(text="The note is written.", input_tokens=50, output_tokens=5),  # child's turn 2
            Reply(text="Helper reports: the note is written.", input_tokens=120, output_tokens=12),
        ]
    )
    workspace = os.path.join(mesh.work, f"kids-{provider}")
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent_name="boss", input="get a note written", workspace=workspace)
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "Helper reports: the note is written."
    assert (
        open(os.path.join(workspace, "note.txt")).read() == "hi"
    )  # the child's tool, the parent's workspace

    assert len(run.child_run_ids) == 1
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run.child_run_ids[0]))).run
    assert child.status == cpb.RUN_STATUS_COMPLETED and child.final_output == "The note is written."
    assert (child.parent_run_id, child.agent_name) == (started.run_id, "helper")
    assert child.session_id != started.session_id and child.turns == 2

    # usage (004 §2.7f, §2.8): the child's total folds into the parent's total and nested part
    assert (child.usage.input_tokens, child.usage.output_tokens, child.usage.requests) == (90, 9, 2)
    assert (run.usage.input_tokens, run.usage.output_tokens, run.usage.requests) == (310, 31, 4)
    assert (run.nested_usage.input_tokens, run.nested_usage.output_tokens) == (90, 9)
    assert run.nested_usage.requests == 2

    # the parent's session holds the call and the child's answer, with the link
    entries = await mesh.entries(started.session_id)
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert [(r.name, r.content, r.child_run_id) for r in results] == [
        ("ask_helper", "The note is written.", child.run_id)
    ]
    assert results[0].nested_usage.input_tokens == 90
    # the child's session is its own, hidden, serving the parent's
    hidden = (await mesh.sessions.GetSession(spb.GetSessionRequest(session=spb.SessionRef(
        session_id=child.session_id)))).session  # fmt: skip
    assert hidden.hidden and hidden.parent_session_id == started.session_id
    child_entries = await mesh.entries(child.session_id)
    assert "write a note" in str(child_entries[0].item)

    # the emulator saw the child's instructions, and the parent's tool as {"input": string}
    bodies = [b for p, b in mesh.emu.requests if p.endswith(("/responses", "/messages"))]
    assert len(bodies) == 4
    assert "You are the helper." in json.dumps(bodies[1]) and "You are the boss." not in json.dumps(bodies[1])
    tool = next(t for t in bodies[0]["tools"] if t["name"] == "ask_helper")
    schema = tool.get("parameters") or tool.get("input_schema")
    assert schema["required"] == ["input"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_link_and_the_childs_progress_are_on_the_parents_stream(mesh, provider):
    await register(mesh, provider, [pb.AgentTool(name="list_files")])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("what files are there?")]),
            Reply(tool_calls=[ToolCallReply("list_files", "{}")]),
            Reply(text="none"),
            Reply(text="There are none."),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="files?"))
    events = await mesh.events(started.run_id)
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    order = kinds(events)
    linked = [e.child_run_linked for e in events if e.WhichOneof("payload") == "child_run_linked"]
    called = next(e.tool_called.call for e in events if e.WhichOneof("payload") == "tool_called")
    assert len(linked) == 1 and linked[0].call_id == called.call_id
    assert (linked[0].child_run_id, linked[0].agent_name) == (run.child_run_ids[0], "helper")
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=linked[0].child_run_id))).run
    assert linked[0].session_id == child.session_id
    assert not next(e for e in events if e.WhichOneof("payload") == "child_run_linked").provisional
    progressed = [e.tool_progressed for e in events if e.WhichOneof("payload") == "tool_progressed"]
    assert {p.call_id for p in progressed} == {called.call_id}
    text = "".join(p.text for p in progressed)
    assert "[helper] -> list_files" in text and "[helper] <- list_files ok" in text
    returned = [e.tool_returned.result for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert [(r.name, r.child_run_id) for r in returned] == [("ask_helper", child.run_id)]
    assert order.index("tool_called") < order.index("child_run_linked") < order.index("tool_progressed")
    assert order.index("tool_progressed") < order.index("tool_returned")
    # the log keeps the link (durable), the child's own stream has its own story
    child_kinds = kinds(await mesh.events(child.run_id))
    assert child_kinds[0] == "run_started" and child_kinds[-1] == "stream_end"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_approval_in_the_child_suspends_both_and_is_answered_through_the_parent(
    store_mesh, provider
):
    mesh = store_mesh  # SQLite and PostgreSQL
    await register(mesh, provider, [pb.AgentTool(name="exec_command", needs_approval=True)])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("append a line")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo one >> lines.txt"}))]),
            Reply(text="appended"),
            Reply(text="The helper appended it."),
        ]
    )
    workspace = os.path.join(mesh.work, f"gate-{provider}")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    assert run.status == cpb.RUN_STATUS_SUSPENDED, run.failure
    child_id = run.child_run_ids[0]
    child = await mesh.wait_status(child_id, cpb.RUN_STATUS_SUSPENDED)
    assert [p.call.call_id for p in child.pending_calls] == [p.call.call_id for p in run.pending_calls]
    shown = run.pending_calls[0]
    assert (shown.kind, shown.call.name, shown.run_id) == (
        pb.PENDING_CALL_KIND_APPROVAL,
        "exec_command",
        child_id,
    )
    assert shown.parent_call_id == child.parent_call_id and shown.parent_call_id
    assert not child.pending_calls[0].run_id  # on the child, the call is its own
    assert not os.path.exists(os.path.join(workspace, "lines.txt"))

    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=shown.call.call_id, approved=True)]
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "The helper appended it."
    assert open(os.path.join(workspace, "lines.txt")).read() == "one\n"
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=child_id))).run
    assert child.status == cpb.RUN_STATUS_COMPLETED and child.final_output == "appended"
    assert run.usage.requests == 4 and run.nested_usage.requests == 2
    assert len(mesh.emu.requests) == 4  # each model request once, the pause asked nothing again
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert [(r.name, r.content) for r in results] == [("ask_helper", "appended")]


async def test_an_approval_in_the_child_can_be_answered_on_the_child(mesh):
    await register(mesh, "openai", [pb.AgentTool(name="exec_command", needs_approval=True)])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("append")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo two >> l.txt"}))]),
            Reply(text="child done"),
            Reply(text="parent done"),
        ]
    )
    workspace = os.path.join(mesh.work, "direct")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    child_id = run.pending_calls[0].run_id
    child = await mesh.wait_status(child_id, cpb.RUN_STATUS_SUSPENDED)
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=child_id,
            decisions=[pb.ApprovalDecision(call_id=child.pending_calls[0].call.call_id, approved=True)],
        )
    )
    # the parent woke in the same call: the answer cannot be given again through it
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(
                run_id=started.run_id,
                decisions=[pb.ApprovalDecision(call_id=child.pending_calls[0].call.call_id, approved=False)],
            )
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert details_of(info.value)[0] in ("RUN_NOT_SUSPENDED", "RUN_FINISHED")
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "parent done", run.failure
    assert open(os.path.join(workspace, "l.txt")).read() == "two\n"


async def test_a_denial_in_the_child_reaches_the_child_model_and_both_complete(mesh):
    await register(mesh, "anthropic", [pb.AgentTool(name="exec_command", needs_approval=True)])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("delete everything")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo no >> d.txt"}))]),
            Reply(text="I was not allowed."),
            Reply(text="The helper was not allowed."),
        ]
    )
    workspace = os.path.join(mesh.work, "deny")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    call_id = run.pending_calls[0].call.call_id
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=False)]
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "The helper was not allowed."
    assert not os.path.exists(os.path.join(workspace, "d.txt"))


async def test_a_failed_child_is_an_error_result_not_a_failed_parent(mesh):
    await register(mesh, "openai", [pb.AgentTool(name="list_files")])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("try")]),
            Reply(text="sorry", stop="refusal"),  # the child fails: refusal
            Reply(text="The helper could not help."),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run.child_run_ids[0]))).run
    assert child.status == cpb.RUN_STATUS_FAILED and child.failure.kind == "refusal"
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].is_error and results[0].content.startswith("The agent's run failed:")
    assert results[0].child_run_id == child.run_id


async def test_canceling_the_parent_cancels_its_suspended_child(mesh):
    await register(mesh, "openai", [pb.AgentTool(name="exec_command", needs_approval=True)])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("wait")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo c >> c.txt"}))]),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="enough"))
    assert (await mesh.wait_status(started.run_id, *DONE)).status == cpb.RUN_STATUS_CANCELED
    child = await mesh.wait_status(run.child_run_ids[0], *DONE)
    assert child.status == cpb.RUN_STATUS_CANCELED


async def test_canceling_the_parent_while_its_child_runs_cancels_the_child(mesh):
    await register(mesh, "openai", [pb.AgentTool(name="exec_command")])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("sleep")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "sleep 20"}))]),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    await mesh.events(started.run_id, until="tool_progressed")  # the child's command is running
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="enough"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_CANCELED
    child = await mesh.wait_status(run.child_run_ids[0], *DONE)
    assert child.status == cpb.RUN_STATUS_CANCELED
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].name == "ask_helper" and results[0].is_error  # the call got its one result


async def test_unusable_input_for_an_agent_tool_goes_back_to_the_model(mesh):
    await register(mesh, "openai", [pb.AgentTool(name="list_files")])
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("ask_helper", json.dumps({"input": "  "}))]),
            Reply(text="ok"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and list(run.child_run_ids) == []
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].is_error and "input" in results[0].content


async def test_bad_input_about_agent_tools_is_refused_and_changes_nothing(mesh):
    # an agent tool naming an unregistered agent: refused at StartRun (RegisterAgent allows it)
    lonely = agent(name="lonely", tools=[pb.AgentTool(name="ask", agent_name="nobody")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=lonely))
    for request in (
        pb.StartRunRequest(agent_name="lonely", input="x"),
        pb.StartRunRequest(agent=lonely, input="x"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(request)
        reason, meta, _ = details_of(info.value)
        assert (info.value.code(), reason) == (grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_AGENT")
        assert meta["field"].endswith("tools[0].agent_name")
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []

    # a client may not set child_run_id on a result it submits
    await register(mesh, "openai", [pb.AgentTool(name="exec_command", needs_approval=True)])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("x")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "true"}))]),
            Reply(text="child"),
            Reply(text="parent"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    call_id = run.pending_calls[0].call.call_id
    forged = cpb.ToolResult(call_id=call_id, content="forged", child_run_id=run.child_run_ids[0])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, results=[forged]))
    reason, meta, _ = details_of(info.value)
    assert (info.value.code(), reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
    assert meta["field"] == "results[0].child_run_id"
    # an answer for a call that is not pending, on the parent: refused, nothing changes
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(
            pb.ResumeRunRequest(
                run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id="nope", approved=True)]
            )
        )
    assert (info.value.code(), details_of(info.value)[0]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_VALUE",
    )
    again = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert again.status == cpb.RUN_STATUS_SUSPENDED and [p.call.call_id for p in again.pending_calls] == [
        call_id
    ]
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run.child_run_ids[0]))).run
    assert child.status == cpb.RUN_STATUS_SUSPENDED
    # the server keeps serving: the approval through the parent still completes both
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
        )
    )
    assert (await mesh.wait_status(started.run_id, *DONE)).status == cpb.RUN_STATUS_COMPLETED


async def test_canceling_a_suspended_child_wakes_its_parent_with_an_error_result(mesh):
    await register(mesh, "anthropic", [pb.AgentTool(name="exec_command", needs_approval=True)])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("wait")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo c >> c.txt"}))]),
            Reply(text="The helper was stopped."),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    child_id = run.child_run_ids[0]
    await mesh.wait_status(child_id, cpb.RUN_STATUS_SUSPENDED)
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=child_id, reason="not this one"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "The helper was stopped.", (
        run.failure
    )
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert results[0].status == cpb.TOOL_RESULT_STATUS_INTERRUPTED and "canceled" in results[0].content
    assert (await mesh.runs.GetRun(pb.GetRunRequest(run_id=child_id))).run.status == cpb.RUN_STATUS_CANCELED


async def test_two_children_in_one_turn_suspend_the_parent_until_both_are_answered(mesh):
    await register(mesh, "openai", [pb.AgentTool(name="exec_command", needs_approval=True)])

    # the two children's model calls interleave: answer by request instead of a fixed script
    def respond(path: str, body):
        text = json.dumps(body)
        if "You are the helper." in text:
            which = "first" if "job first" in text else "second"
            if "function_call_output" in text:
                return Reply(text=f"{which} done")
            cmd = f"echo {which} >> both.txt"
            return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])
        if "function_call_output" in text:
            return Reply(text="both done")
        return Reply(tool_calls=[ask("job first"), ask("job second")])

    mesh.emu.responder = respond
    workspace = os.path.join(mesh.work, "two")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))

    async def both_shown() -> pb.Run:
        while True:
            run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
            if run.status == cpb.RUN_STATUS_SUSPENDED and len(run.pending_calls) == 2:
                return run
            assert run.status in (cpb.RUN_STATUS_RUNNING, cpb.RUN_STATUS_SUSPENDED), run.failure
            await asyncio.sleep(0.05)

    run = await asyncio.wait_for(both_shown(), 30)
    assert {p.run_id for p in run.pending_calls} == set(run.child_run_ids) and len(run.child_run_ids) == 2
    first, second = run.pending_calls
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=first.call.call_id, approved=True)]
        )
    )
    await mesh.wait_status(first.run_id, cpb.RUN_STATUS_COMPLETED)
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED and [p.call.call_id for p in run.pending_calls] == [
        second.call.call_id
    ]
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=second.call.call_id, approved=True)]
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "both done", run.failure
    assert sorted(open(os.path.join(workspace, "both.txt")).read().split()) == ["first", "second"]
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert [r.content for r in results] == ["first done", "second done"]


async def test_a_childs_spans_join_the_parents_trace_under_the_calls_span(start_server, tmp_path, emulator):
    from tests.service.runs.harness import start_mesh
    from tests.tracing import recorded

    with recorded() as rec:
        mesh = await start_mesh(start_server, tmp_path, emulator)
        await register(mesh, "openai", [pb.AgentTool(name="list_files")])
        mesh.emu.script(
            [
                Reply(tool_calls=[ask("look")]),
                Reply(tool_calls=[ToolCallReply("list_files", "{}")]),
                Reply(text="nothing"),
                Reply(text="Nothing there."),
            ]
        )
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
        run = await mesh.wait_status(started.run_id, *DONE)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        manager = mesh.runs_server.manager  # type: ignore[attr-defined]
        await manager.wait_idle(started.run_id)
        await manager.wait_idle(run.child_run_ids[0])
        spans = rec.spans
    by_id = {s.context.span_id: s for s in spans}
    parent_span, child_span = rec.named("invoke_agent boss"), rec.named("invoke_agent helper")
    assert child_span.context.trace_id == parent_span.context.trace_id
    assert child_span.parent is not None
    call_span = by_id[child_span.parent.span_id]
    assert call_span.name == "execute_tool ask_helper"
    ancestors, span = [], call_span
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        ancestors.append(span)
    assert parent_span in ancestors
    assert dict(child_span.attributes or {})["agentrt.run.id"] == run.child_run_ids[0]


async def test_a_sibling_of_a_suspended_child_keeps_its_output_and_runs_once(mesh):
    # 004 §2.2 step 6: completed siblings keep their outputs; the interrupted call's is withheld
    await register(
        mesh,
        "openai",
        [pb.AgentTool(name="exec_command", needs_approval=True)],
        tools=[pb.AgentTool(name="exec_command")],
    )
    sibling = ToolCallReply("exec_command", json.dumps({"cmd": "echo sib >> sib.txt; echo sib-ok"}))
    mesh.emu.script(
        [
            Reply(tool_calls=[sibling, ask("gate")]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo kid >> kid.txt"}))]),
            Reply(text="kid done"),
            Reply(text="all done"),
        ]
    )
    workspace = os.path.join(mesh.work, "sib")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    assert run.status == cpb.RUN_STATUS_SUSPENDED, run.failure
    assert open(os.path.join(workspace, "sib.txt")).read() == "sib\n"  # the sibling ran before the pause
    events = await mesh.events(started.run_id, until="run_suspended")
    returned = [e.tool_returned.result.name for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert returned == ["exec_command"]  # the child's call is withheld
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id,
            decisions=[pb.ApprovalDecision(call_id=run.pending_calls[0].call.call_id, approved=True)],
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "all done", run.failure
    assert open(os.path.join(workspace, "sib.txt")).read() == "sib\n"  # not again: the journal answered
    results = [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ]
    assert [(r.name, r.content) for r in results] == [
        ("exec_command", "sib-ok\n"),
        ("ask_helper", "kid done"),
    ]


async def test_an_approval_two_levels_down_bubbles_up_and_is_answered_at_the_top(mesh):
    deep = agent(
        "openai",
        name="deep",
        instructions="You are deep.",
        tools=[pb.AgentTool(name="exec_command", needs_approval=True)],
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=deep))
    await register(mesh, "openai", [pb.AgentTool(name="ask_deep", agent_name="deep")])
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("go deeper")]),  # boss
            Reply(tool_calls=[ToolCallReply("ask_deep", json.dumps({"input": "do it"}))]),  # helper
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo deep >> deep.txt"}))]),
            Reply(text="deep done"),
            Reply(text="helper done"),
            Reply(text="boss done"),
        ]
    )
    workspace = os.path.join(mesh.work, "deep")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    assert run.status == cpb.RUN_STATUS_SUSPENDED, run.failure
    helper = await mesh.wait_status(run.child_run_ids[0], cpb.RUN_STATUS_SUSPENDED)
    (shown,) = run.pending_calls
    assert (
        shown.run_id == helper.child_run_ids[0]
        and shown.parent_call_id == helper.pending_calls[0].parent_call_id
    )
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=shown.call.call_id, approved=True)]
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "boss done", run.failure
    assert open(os.path.join(workspace, "deep.txt")).read() == "deep\n"
    assert run.usage.requests == 6 and run.nested_usage.requests == 4  # the helper's total includes deep's


async def test_a_child_agents_own_sandbox_is_honored_and_released_at_its_end(mesh):
    from tests.service.runs.sandbox_helpers import LOCAL, released, sh

    helper = agent(
        "openai",
        name="helper",
        instructions="You are the helper.",
        tools=[pb.AgentTool(name="exec_command")],
        sandbox=pb.RunSandbox(backend=LOCAL, env={"WHERE": "in-the-childs-box"}),
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    boss = agent("openai", name="boss", tools=[pb.AgentTool(name="ask_helper", agent_name="helper")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))
    mesh.emu.script(
        [
            Reply(tool_calls=[ask("where?")]),
            Reply(tool_calls=[sh('echo "$WHERE"; pwd')]),
            Reply(text="here"),
            Reply(text="ok"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert not run.sandbox_id  # the parent has none of its own
    child = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run.child_run_ids[0]))).run
    assert child.sandbox_id.startswith("sbx_")
    results = [
        e.item.tool_result for e in await mesh.entries(child.session_id) if e.item.HasField("tool_result")
    ]
    assert (
        "in-the-childs-box" in results[0].content
        and os.path.join("sandboxes", child.sandbox_id) in results[0].content
    )
    await released(mesh, child.sandbox_id)
