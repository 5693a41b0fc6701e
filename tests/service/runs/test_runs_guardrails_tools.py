"""Tool-stage guardrails, replay from the run log, and bad guardrail specs (004 §2.6, §2.7f)."""

from __future__ import annotations

import json
import os

import grpc
import pytest

from agentrt.core.decide import mint_call_id
from agentrt.mesh.status import details_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.guards import (
    ALLOW,
    IN,
    OUT,
    REPLACE,
    TOOL_IN,
    TOOL_OUT,
    TRIP,
    details,
    judge,
    judge_calls,
    judged_by,
    model_calls,
    nested_of,
    pattern,
    results,
    texts,
    verdict,
)
from tests.service.runs.harness import agent, start_mesh, start_replica
from tests.service.runs.test_runs_takeover import crash, until

PROVIDERS = ["openai", "anthropic"]
ENDED = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)


async def start(
    mesh, spec: pb.AgentSpec, text: str = "go", name: str = "ws"
) -> tuple[pb.StartRunResponse, pb.Run, str]:
    workspace = os.path.join(mesh.work, name)
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input=text, workspace=workspace))
    return started, await mesh.wait_status(started.run_id, *ENDED), workspace


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tool_input_replace_answers_the_call_and_the_tool_never_runs(mesh, provider):
    guard = pattern(
        "no_env", [TOOL_IN], [r'"path":\s*"\.env"'], replacement="Writing .env files is not allowed."
    )
    spec = agent(provider, tools=[pb.AgentTool(name="write_file", guardrails=[guard])])
    args = json.dumps({"path": ".env", "content": "TOKEN=abc"})
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("write_file", args)]), Reply(text="understood")])
    started, run, workspace = await start(mesh, spec)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "understood", run.failure
    assert not os.path.exists(os.path.join(workspace, ".env"))  # the side effect was not performed
    entries = await mesh.entries(started.session_id)
    (result,) = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert (
        result.content == "Writing .env files is not allowed." and result.status == cpb.TOOL_RESULT_STATUS_OK
    )
    assert "Writing .env files is not allowed." in json.dumps(model_calls(mesh)[1][1])
    got = results(await mesh.events(started.run_id))
    assert [(g.guardrail, g.stage, g.decision, g.scope) for g in got] == [
        ("no_env", TOOL_IN, REPLACE, "tool")
    ]
    assert got[0].call_id == mint_call_id(started.run_id, 1, 0)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tool_input_tripwire_fails_the_run_before_anything_of_the_batch_runs(mesh, provider):
    guard = pattern("no_rm", [TOOL_IN], [r"rm\s+-rf"])
    spec = agent(
        provider,
        tools=[pb.AgentTool(name="exec_command"), pb.AgentTool(name="write_file")],
        guardrails=[guard],
    )
    calls = [
        ToolCallReply("write_file", json.dumps({"path": "first.txt", "content": "1"})),
        ToolCallReply("exec_command", json.dumps({"cmd": "touch marker; rm -rf /tmp/nothing"})),
    ]
    mesh.emu.script([Reply(tool_calls=calls), Reply(text="never asked")])
    started, run, workspace = await start(mesh, spec)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "guardrail_tripped"
    assert details(run) == {
        "guardrail": "no_rm",
        "stage": "tool_input",
        "scope": "agent",
        "call_id": mint_call_id(started.run_id, 1, 1),
    }
    assert not os.path.exists(os.path.join(workspace, "marker"))
    assert not os.path.exists(os.path.join(workspace, "first.txt"))
    assert len(model_calls(mesh)) == 1
    got = results(await mesh.events(started.run_id))
    assert [(g.guardrail, g.decision) for g in got] == [
        ("no_rm", ALLOW),
        ("no_rm", TRIP),
    ]  # each call checked


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tool_output_replace_is_what_the_model_the_session_and_the_stream_see(mesh, provider):
    guard = pattern("no_keys", [TOOL_OUT], [r"API_KEY=\w+"], replacement="[file withheld: it holds a key]")
    spec = agent(provider, tools=[pb.AgentTool(name="read_file", guardrails=[guard])])
    workspace = os.path.join(mesh.work, "ws")
    os.makedirs(workspace, exist_ok=True)
    with open(os.path.join(workspace, "config.env"), "w") as f:
        f.write("API_KEY=abc123\n")
    with open(os.path.join(workspace, "notes.txt"), "w") as f:
        f.write("plain notes\n")
    calls = [
        ToolCallReply("read_file", '{"path": "config.env"}'),
        ToolCallReply("read_file", '{"path": "notes.txt"}'),
    ]
    mesh.emu.script([Reply(tool_calls=calls), Reply(text="ok")])
    started, run, _ = await start(mesh, spec)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    second = json.dumps(model_calls(mesh)[1][1])
    assert "[file withheld: it holds a key]" in second and "abc123" not in second
    assert "plain notes" in second  # the allowed result reaches the model as it was
    entries = await mesh.entries(started.session_id)
    assert "[file withheld: it holds a key]" in texts(entries)
    withheld, allowed = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert json.loads(withheld.details_json) == {"replaced_by_guardrail": "no_keys"}
    assert "plain notes" in allowed.content
    assert not any("abc123" in e.SerializeToString().decode("utf-8", "replace") for e in entries)
    events = await mesh.events(started.run_id)
    returned = [e.tool_returned.result.content for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert returned[0] == "[file withheld: it holds a key]" and "plain notes" in returned[1]
    assert not any("abc123" in x for x in returned)  # the stream never showed the original
    got = results(events)
    assert [(g.stage, g.decision) for g in got] == [(TOOL_OUT, REPLACE), (TOOL_OUT, ALLOW)]
    assert [g.call_id for g in got] == [
        mint_call_id(started.run_id, 1, 0),
        mint_call_id(started.run_id, 1, 1),
    ]


async def test_tool_stages_run_the_agents_then_the_tools_and_stop_at_the_first_replace(mesh):
    agent_level = pattern("agent_check", [TOOL_IN], ["never-matches"])
    tool_level = [
        pattern("tool_replace", [TOOL_IN], ["notes"], replacement="Use another file name."),
        pattern("tool_trip", [TOOL_IN], ["."]),  # would trip on anything: never consulted
    ]
    spec = agent(
        "openai", tools=[pb.AgentTool(name="write_file", guardrails=tool_level)], guardrails=[agent_level]
    )
    args = json.dumps({"path": "notes.txt", "content": "x"})
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("write_file", args)]), Reply(text="fine")])
    started, run, workspace = await start(mesh, spec)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    got = results(await mesh.events(started.run_id))
    assert [(g.guardrail, g.scope, g.decision) for g in got] == [
        ("agent_check", "agent", ALLOW),
        ("tool_replace", "tool", REPLACE),
    ]
    assert not os.path.exists(os.path.join(workspace, "notes.txt"))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tool_output_tripwire_fails_the_run_and_the_result_never_reaches_the_model(mesh, provider):
    guard = judge("leak_check", [TOOL_OUT], prompt="Trip on any file listing.")
    mesh.emu.responder = judged_by(lambda p, b: verdict("trip", "listing files is not allowed"))
    spec = agent(provider, tools=[pb.AgentTool(name="list_files")], guardrails=[guard])
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="never asked")])
    started, run, _ = await start(mesh, spec)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "guardrail_tripped"
    assert details(run)["stage"] == "tool_output" and "listing files is not allowed" in run.failure.message
    assert len(model_calls(mesh)) == 1 and len(judge_calls(mesh)) == 1
    assert nested_of(run) == (7, 3, 1) and run.usage.input_tokens == 10 + 7
    assert [
        e.item.tool_result for e in await mesh.entries(started.session_id) if e.item.HasField("tool_result")
    ] == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_client_tools_are_guarded_before_the_client_is_asked_and_on_what_it_returns(mesh, provider):
    lookup = cpb.ToolSpec(
        name="lookup", description="Look a person up", external=True,
        parameters_json_schema=json.dumps({"type": "object", "properties": {"q": {"type": "string"}}}),
    )  # fmt: skip
    guards = [
        pattern("no_admins", [TOOL_IN], ["admin"], replacement="Looking up admins is not allowed."),
        pattern("no_ssn", [TOOL_OUT], [r"\d{3}-\d{2}-\d{4}"], replacement="[record withheld]"),
    ]
    spec = agent(provider, tools=[pb.AgentTool(name="lookup", spec=lookup, guardrails=guards)])
    calls = [ToolCallReply("lookup", '{"q": "admin"}'), ToolCallReply("lookup", '{"q": "ann"}')]
    mesh.emu.script([Reply(tool_calls=calls), Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="who?"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    (pending,) = run.pending_calls  # the replaced call is answered: the client is asked about one
    assert json.loads(pending.call.arguments) == {"q": "ann"}
    result = cpb.ToolResult(call_id=pending.call.call_id, content="Ann, SSN 123-45-6789")
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, results=[result]))
    run = await mesh.wait_status(started.run_id, *ENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    seen = json.dumps(model_calls(mesh)[1][1])
    assert (
        "Looking up admins is not allowed." in seen and "[record withheld]" in seen and "123-45" not in seen
    )
    kept = texts(await mesh.entries(started.session_id))
    assert "[record withheld]" in kept and not any("123-45" in t for t in kept)
    got = results(await mesh.events(started.run_id))
    assert [(g.guardrail, g.stage, g.decision) for g in got] == [
        ("no_admins", TOOL_IN, REPLACE),
        ("no_admins", TOOL_IN, ALLOW),
        ("no_ssn", TOOL_OUT, REPLACE),
    ]


async def test_a_tool_input_decision_is_read_from_the_run_log_after_an_approval(mesh):
    """The judge is asked once: the resumed run reads its verdict from the run log."""
    mesh.emu.responder = judged_by(lambda p, b: verdict("allow", "harmless"))
    spec = agent(
        "anthropic",
        tools=[pb.AgentTool(name="exec_command", needs_approval=True)],
        guardrails=[judge("cmd_check", [TOOL_IN])],
    )
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo hi > ran.txt"}')]), Reply(text="ok")]
    )
    workspace = os.path.join(mesh.work, "ws")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert len(judge_calls(mesh)) == 1  # checked before the person is asked
    call_id = run.pending_calls[0].call.call_id
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
        )
    )
    run = await mesh.wait_status(started.run_id, *ENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert os.path.exists(os.path.join(workspace, "ran.txt"))
    assert len(judge_calls(mesh)) == 1  # not asked again
    assert nested_of(run) == (7, 3, 1)
    got = results(await mesh.events(started.run_id))
    assert [(g.guardrail, g.decision, g.call_id) for g in got] == [("cmd_check", ALLOW, call_id)]


async def test_a_takeover_reads_the_guardrail_decisions_from_the_log(start_server, tmp_path, emulator):
    """Replica a's judge allowed the call, then a died mid-command; b never asks the judge again."""
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    emulator.responder = judged_by(lambda p, b: verdict("allow"))
    cmd = json.dumps({"cmd": "sleep 1.5; echo line >> side.txt; echo finished"})
    emulator.script([Reply(tool_calls=[ToolCallReply("exec_command", cmd)]), Reply(text="recovered")])
    spec = agent(tools=[pb.AgentTool(name="exec_command")], guardrails=[judge("cmd_check", [TOOL_IN, OUT])])
    workspace = os.path.join(mesh.work, "takeover")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go", workspace=workspace))
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))
    call_id = mint_call_id(started.run_id, 1, 0)

    async def tool_running() -> bool:
        got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED

    await until(tool_running, "the tool call to be running in the tool service")
    assert len(judge_calls(mesh)) == 1
    crash(mesh.runs_server)
    replica_b, stub = await start_replica(mesh, start_server)

    async def ended() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status in ENDED

    await until(ended, "replica b to finish the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "recovered", run.failure
    # one judge call for the tool input (replica a, from the log on b), one for the output (b)
    assert len(judge_calls(mesh)) == 2
    assert nested_of(run) == (14, 6, 2)
    with open(os.path.join(workspace, "side.txt")) as f:
        assert f.read() == "line\n"
    log = await replica_b.manager.store.read_log(started.run_id)
    keys = [p["key"] for _, kind, p in log if kind == "guardrail_results"]
    assert keys == [f"tool_input:1:{call_id}:", "output:2::"]


# -- bad specs ----------------------------------------------------------------------------

BAD = [
    (pattern("g", [TOOL_IN], ["(unclosed"]), "INVALID_VALUE", "agent.guardrails[0].pattern.patterns[0]"),
    (pattern("g", [IN, IN], ["x"]), "INVALID_VALUE", "agent.guardrails[0].stages"),
    (pb.Guardrail(name="g", stages=[OUT]), "MISSING_FIELD", "agent.guardrails[0].kind"),
    (
        pb.Guardrail(name="g", stages=[OUT], model=pb.ModelGuardrail()),
        "MISSING_FIELD",
        "agent.guardrails[0].model.prompt",
    ),
    (
        pb.Guardrail(
            name="g",
            stages=[OUT],
            model=pb.ModelGuardrail(prompt="p", model=cpb.ModelRef(provider="nowhere")),
        ),
        "INVALID_AGENT",
        "agent.guardrails[0].model.model.provider",
    ),
]


async def test_bad_guardrail_specs_are_refused_and_change_nothing(mesh):
    for guard, reason, field in BAD:
        spec = agent(name="a", guardrails=[guard])
        for call in (
            mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=spec)),
            mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            got_reason, meta, _ = details_of(info.value)
            assert (info.value.code(), got_reason, meta.get("field")) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                reason,
                field,
            ), info.value.details()
    tool_level = pb.AgentTool(name="read_file", guardrails=[pattern("g", [IN], ["x"])])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(tools=[tool_level]), input="x"))
    assert details_of(info.value)[1]["field"] == "agent.tools[0].guardrails[0].stages[0]"
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
    # the server keeps serving: a good guarded run goes through
    mesh.emu.script([Reply(text="fine")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=agent(tools=[], guardrails=[pattern("g", [OUT], ["nothing-like-this"])]), input="x"
        )
    )
    run = await mesh.wait_status(started.run_id, *ENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "fine"


async def test_after_a_handoff_the_targets_guardrails_apply_not_the_entry_agents(mesh):
    """Output and tool stages belong to the agent whose turn it is (004 §2.6 placement)."""
    billing = agent(
        "anthropic",
        name="billing",
        tools=[pb.AgentTool(name="list_files")],
        guardrails=[pattern("billing_out", [OUT], ["invoice"], replacement="[billing answer withheld]")],
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=billing))
    triage = agent(
        "anthropic",
        name="triage",
        tools=[],
        handoffs=["billing"],
        guardrails=[pattern("triage_out", [OUT], ["invoice"]), pattern("triage_tools", [TOOL_IN], ["."])],
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=triage))
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("transfer_to_billing", "{}")]),
            Reply(tool_calls=[ToolCallReply("list_files", "{}")]),
            Reply(text="your invoice is paid"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="triage", input="my invoice?"))
    run = await mesh.wait_status(started.run_id, *ENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "[billing answer withheld]"  # billing's Replace, not triage's tripwire
    got = results(await mesh.events(started.run_id))
    assert [(g.guardrail, g.decision) for g in got] == [("billing_out", REPLACE)]  # triage's never consulted


async def test_agentrt_run_shows_the_guardrails_of_a_real_run_live(mesh, capsys, monkeypatch):
    from tests.service.runs.test_runs_cli_live import fits, run_cli

    guards = [
        pattern("no_env", [TOOL_IN], [r"\.env"], replacement="Writing .env files is not allowed."),
        pattern("no_codes", [OUT], [r"\d{4}"]),
    ]
    spec = agent(name="guarded", tools=[pb.AgentTool(name="write_file")], guardrails=guards)
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=spec))
    args = json.dumps({"path": ".env", "content": "X=1"})
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("write_file", args)]), Reply(text="the code is 4711")])
    code, lines, err = await run_cli(capsys, monkeypatch, mesh, "--agent", "guarded", "write it")
    assert code != 0, (lines, err)  # the run failed on the output tripwire
    fits(lines)
    replaced = next(
        i for i, line in enumerate(lines) if line.startswith("◆ guardrail no_env · tool input (agent)")
    )
    assert "· replaced" in lines[replaced] and "[call_" in lines[replaced]
    assert lines[replaced + 1].strip() == "Writing .env files is not allowed."
    assert any(line.startswith("◆ guardrail no_codes · output (agent) · tripped") for line in lines)
    assert "guardrail_tripped" in "\n".join(lines)
