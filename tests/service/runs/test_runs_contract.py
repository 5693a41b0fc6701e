"""The turn contract of issue 11 at RegisterAgent, StartRun, ResumeRun and StopAfterTurn.

Every field is validated in full (bad input: INVALID_ARGUMENT with a reason and the field);
a well-formed spec that uses what the run loop does not honor yet is refused with
UNIMPLEMENTED/NOT_IMPLEMENTED_YET naming the field; nothing is stored or started either way,
and the server keeps serving.
"""

from __future__ import annotations

import json

import grpc
import pytest

from agentrt.mesh.status import details_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

IA, UN, NF = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND
INPUT, OUTPUT = pb.GUARDRAIL_STAGE_INPUT, pb.GUARDRAIL_STAGE_OUTPUT
SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


def pattern(name: str = "g", stages=(OUTPUT,), **kw) -> pb.Guardrail:
    kw.setdefault("patterns", ["secret"])
    return pb.Guardrail(name=name, stages=list(stages), pattern=pb.PatternGuardrail(**kw))


def fallback(text: str) -> pb.ErrorHandler:
    return pb.ErrorHandler(action=pb.ERROR_HANDLER_ACTION_FALLBACK, fallback_message=text)


def ext(schema: str = "", **kw) -> pb.AgentTool:
    """A client-declared tool named "mine"."""
    return pb.AgentTool(name="mine", spec=cpb.ToolSpec(external=True, parameters_json_schema=schema), **kw)


def judge(**kw) -> pb.Guardrail:
    return pb.Guardrail(name="j", stages=[INPUT], model=pb.ModelGuardrail(**kw))


H, T, F, EH = pb.Handoff, pb.AgentTool, pb.HandoffInputFilter, pb.ErrorHandlers


#: (spec fields, reason, metadata field without "agent.")
BAD = [
    ({"output_json_schema": json.dumps({"type": "objekt"})}, "INVALID_SCHEMA", "output_json_schema"),
    (
        {"output_json_schema": json.dumps({"properties": {"n": {"minimum": "x"}}})},
        "INVALID_SCHEMA",
        "output_json_schema",
    ),
    (
        {"settings": cpb.ModelSettings(output_json_schema='{"required": 3}')},
        "INVALID_SCHEMA",
        "settings.output_json_schema",
    ),
    ({"tools": [ext('{"type": 7}')]}, "INVALID_SCHEMA", "tools[0].spec.parameters_json_schema"),
    ({"tools": [ext('{"type": "array"}')]}, "INVALID_VALUE", "tools[0].spec.parameters_json_schema"),
    ({"handoffs": ["bad name!"]}, "INVALID_AGENT", "handoffs[0]"),
    ({"handoff_targets": [H()]}, "MISSING_FIELD", "handoff_targets[0].agent_name"),
    (
        {"handoffs": ["b"], "handoff_targets": [H(agent_name="b")]},
        "INVALID_VALUE",
        "handoff_targets[0].agent_name",
    ),
    ({"handoffs": ["a"]}, "INVALID_VALUE", "handoffs[0]"),  # the agent itself
    (
        {"handoff_targets": [H(agent_name="b", agent_version=-1)]},
        "INVALID_VALUE",
        "handoff_targets[0].agent_version",
    ),
    (
        {"handoff_targets": [H(agent_name="b", tool_name="x y")]},
        "INVALID_VALUE",
        "handoff_targets[0].tool_name",
    ),
    (
        {"tools": [T(name="read_file")], "handoff_targets": [H(agent_name="b", tool_name="read_file")]},
        "INVALID_VALUE",
        "handoff_targets[0].tool_name",
    ),
    (
        {"handoff_targets": [H(agent_name="b", input_json_schema='{"type": "string"}')]},
        "INVALID_VALUE",
        "handoff_targets[0].input_json_schema",
    ),
    (
        {"handoff_targets": [H(agent_name="b", input_json_schema='{"type": 1}')]},
        "INVALID_SCHEMA",
        "handoff_targets[0].input_json_schema",
    ),
    (
        {"handoff_targets": [H(agent_name="b", input_filter=F(keep_last_turns=-1))]},
        "INVALID_VALUE",
        "handoff_targets[0].input_filter.keep_last_turns",
    ),
    ({"handoffs": [f"b{i}" for i in range(33)]}, "INVALID_VALUE", "handoff_targets"),
    ({"tools": [T(name="ask", agent_name="no good")]}, "INVALID_AGENT", "tools[0].agent_name"),
    ({"tools": [T(name="ask", agent_name="b", agent_version=-2)]}, "INVALID_VALUE", "tools[0].agent_version"),
    (
        {"tools": [T(name="ask", agent_name="b", spec=cpb.ToolSpec(external=True))]},
        "INVALID_VALUE",
        "tools[0].spec",
    ),
    ({"tools": [T(name="read_file", description="reads")]}, "INVALID_VALUE", "tools[0].description"),
    ({"tools": [T(name="read_file", agent_version=2)]}, "INVALID_VALUE", "tools[0].agent_version"),
    ({"tools": [ext(terminates_run=True)]}, "INVALID_VALUE", "tools[0].terminates_run"),
    ({"guardrails": [pattern(name="bad name!")]}, "INVALID_VALUE", "guardrails[0].name"),
    ({"guardrails": [pattern(), pattern()]}, "INVALID_VALUE", "guardrails[1].name"),
    ({"guardrails": [pattern(stages=())]}, "MISSING_FIELD", "guardrails[0].stages"),
    ({"guardrails": [pattern(stages=(OUTPUT, OUTPUT))]}, "INVALID_VALUE", "guardrails[0].stages"),
    ({"guardrails": [pattern(stages=(9,))]}, "INVALID_VALUE", "guardrails[0].stages[0]"),
    ({"guardrails": [pb.Guardrail(name="g", stages=[OUTPUT])]}, "MISSING_FIELD", "guardrails[0].kind"),
    ({"guardrails": [pattern(patterns=["ok", "x("])]}, "INVALID_VALUE", "guardrails[0].pattern.patterns[1]"),
    (
        {"guardrails": [pattern(patterns=["[[:alpha:]]"])]},
        "INVALID_VALUE",
        "guardrails[0].pattern.patterns[0]",
    ),
    ({"guardrails": [pattern(patterns=["a"] * 257)]}, "INVALID_VALUE", "guardrails[0].pattern.patterns"),
    ({"guardrails": [pattern(patterns=[])]}, "MISSING_FIELD", "guardrails[0].pattern.patterns"),
    (
        {"guardrails": [pattern(on_match=pb.GUARDRAIL_DECISION_ALLOW)]},
        "INVALID_VALUE",
        "guardrails[0].pattern.on_match",
    ),
    (
        {"guardrails": [pattern(on_match=pb.GUARDRAIL_DECISION_REPLACE)]},
        "MISSING_FIELD",
        "guardrails[0].pattern.replacement",
    ),
    ({"guardrails": [pattern(replacement="x")]}, "INVALID_VALUE", "guardrails[0].pattern.replacement"),
    ({"guardrails": [pattern(message="m" * 1025)]}, "INVALID_VALUE", "guardrails[0].pattern.message"),
    (
        {
            "guardrails": [
                pb.Guardrail(
                    name="g",
                    stages=[OUTPUT],
                    input_mode=pb.GUARDRAIL_INPUT_MODE_BLOCKING,
                    pattern=pb.PatternGuardrail(patterns=["x"]),
                )
            ]
        },
        "INVALID_VALUE",
        "guardrails[0].input_mode",
    ),
    ({"guardrails": [judge()]}, "MISSING_FIELD", "guardrails[0].model.prompt"),
    (
        {"guardrails": [judge(prompt="p", model=cpb.ModelRef(provider="nope"))]},
        "INVALID_AGENT",
        "guardrails[0].model.model.provider",
    ),
    (
        {"guardrails": [judge(prompt="p", max_output_tokens=9000)]},
        "INVALID_VALUE",
        "guardrails[0].model.max_output_tokens",
    ),
    (
        {"tools": [T(name="read_file", guardrails=[pattern(stages=(OUTPUT,))])]},
        "INVALID_VALUE",
        "tools[0].guardrails[0].stages[0]",
    ),
    ({"output_strategy": pb.OUTPUT_STRATEGY_TOOL}, "INVALID_VALUE", "output_strategy"),
    ({"output_strategy": 9, "output_json_schema": SCHEMA}, "INVALID_VALUE", "output_strategy"),
    (
        {"output_strategy": pb.OUTPUT_STRATEGY_NATIVE, "output_json_schema": SCHEMA},
        "UNSUPPORTED_CAPABILITY",
        "output_strategy",
    ),
    (
        {"output_json_schema": SCHEMA, "tools": [T(name="final_output", spec=cpb.ToolSpec(external=True))]},
        "INVALID_VALUE",
        "tools",
    ),
    (
        {"error_handlers": EH(max_turns=pb.ErrorHandler(action=pb.ERROR_HANDLER_ACTION_FALLBACK))},
        "MISSING_FIELD",
        "error_handlers.max_turns.fallback_message",
    ),
    (
        {"error_handlers": EH(refusal=pb.ErrorHandler(fallback_message="x"))},
        "INVALID_VALUE",
        "error_handlers.refusal.fallback_message",
    ),
    (
        {"error_handlers": EH(refusal=pb.ErrorHandler(action=7))},
        "INVALID_VALUE",
        "error_handlers.refusal.action",
    ),
    (
        {"output_json_schema": SCHEMA, "error_handlers": EH(invalid_final_output=fallback('{"n": "x"}'))},
        "INVALID_VALUE",
        "error_handlers.invalid_final_output.fallback_message",
    ),
    (
        {"output_json_schema": SCHEMA, "error_handlers": EH(max_turns=fallback("sorry"))},
        "INVALID_JSON",
        "error_handlers.max_turns.fallback_message",
    ),
    ({"sandbox": pb.RunSandbox(image="python:3")}, "UNSUPPORTED_CAPABILITY", "sandbox.image"),
    (
        {"sandbox": pb.RunSandbox(backend=tpb.SANDBOX_BACKEND_DOCKER, network="host")},
        "INVALID_VALUE",
        "sandbox.network",
    ),
    ({"sandbox": pb.RunSandbox(env={"1BAD": "x"})}, "INVALID_VALUE", "sandbox.env"),
    (
        {"sandbox": pb.RunSandbox(backend=tpb.SANDBOX_BACKEND_DOCKER, image="no spaces allowed")},
        "INVALID_VALUE",
        "sandbox.image",
    ),
    (
        {"sandbox": pb.RunSandbox(limits=tpb.SandboxLimits(memory_bytes=-1))},
        "INVALID_VALUE",
        "sandbox.limits.memory_bytes",
    ),
    ({"sandbox": pb.RunSandbox(backend=5)}, "INVALID_VALUE", "sandbox.backend"),
]

#: Well-formed uses of what the loop does not honor yet: (spec fields, metadata field).
UNWIRED = [
    ({"tools": [T(name="ask", agent_name="b")]}, "tools[0].agent_name"),
]


async def expect(call, code: grpc.StatusCode, reason: str, field: str | None = None) -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    got_reason, meta, _ = details_of(info.value)
    assert (info.value.code(), got_reason) == (code, reason), info.value.details()
    if field is not None:
        assert meta.get("field") == field, (meta, info.value.details())
    return {"details": info.value.details() or "", **meta}


async def nothing_changed(mesh) -> None:
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.GetAgent(pb.GetAgentRequest(name="a"))
    assert info.value.code() == NF


async def test_bad_contract_fields_are_refused_with_the_field(mesh):
    for fields, reason, field in BAD:
        spec = agent(name="a", **fields)
        for method, request in (
            ("RegisterAgent", pb.RegisterAgentRequest(agent=spec)),
            ("StartRun", pb.StartRunRequest(agent=spec, input="x")),
        ):
            await expect(getattr(mesh.runs, method)(request), IA, reason, f"agent.{field}")
    await nothing_changed(mesh)


async def test_a_malformed_output_schema_names_the_schema_error_and_where(mesh):
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}})
    meta = await expect(
        mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="a", output_json_schema=schema))),
        IA,
        "INVALID_SCHEMA",
        "agent.output_json_schema",
    )
    assert meta["schema_pointer"] == "/properties/n/minimum"
    assert "'zero' is not of type 'number'" in meta["details"]
    await nothing_changed(mesh)


async def test_unhonored_contract_fields_are_refused_not_ignored(mesh):
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="b")))  # the referenced agent
    for fields, field in UNWIRED:
        spec = agent(name="a", **fields)
        for method, request in (
            ("RegisterAgent", pb.RegisterAgentRequest(agent=spec)),
            ("StartRun", pb.StartRunRequest(agent=spec, input="x")),
        ):
            meta = await expect(getattr(mesh.runs, method)(request), UN, "NOT_IMPLEMENTED_YET")
            assert meta["field"].startswith(f"agent.{field}"), (fields, meta)
    await nothing_changed(mesh)


async def test_references_to_unregistered_agents_are_refused_at_start(mesh):
    # RegisterAgent does not require targets to exist (two agents may hand off to each
    # other); StartRun does, before anything else of the contract is refused.
    spec = agent(name="a", handoff_targets=[pb.Handoff(agent_name="billing", agent_version=3)])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=spec))
    await expect(
        mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x")),
        IA,
        "UNKNOWN_AGENT",
        "agent.handoff_targets[0].agent_name",
    )
    tool = agent(name="a", tools=[pb.AgentTool(name="ask", agent_name="helper")])
    await expect(
        mesh.runs.StartRun(pb.StartRunRequest(agent=tool, input="x")),
        IA,
        "UNKNOWN_AGENT",
        "agent.tools[0].agent_name",
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="billing")))
    await expect(  # version 1 exists, version 3 does not
        mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x")), IA, "UNKNOWN_AGENT"
    )
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
    mesh.emu.script([Reply(text="fine")])
    ok = agent(name="a", handoffs=["billing"])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=ok, input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)


async def test_structured_output_with_tools_registers_and_runs_on_openai(mesh):
    # (it used to be refused until the final-output tool was wired; test_runs_structured.py
    # covers the strategy itself)
    spec = agent(name="a", output_json_schema=SCHEMA, tools=[pb.AgentTool(name="read_file")])
    registered = await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=spec))  # AUTO is valid
    assert registered.agent.version == 1
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("final_output", '{"n": 3}')])])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="a", input="x"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert json.loads(run.final_output) == {"n": 3}


async def test_native_structured_output_is_checked_against_the_default_model_at_start(mesh):
    # no provider named: RegisterAgent cannot know; StartRun resolves the default (openai here)
    spec = pb.AgentSpec(
        name="a", output_json_schema=SCHEMA, output_strategy=pb.OUTPUT_STRATEGY_NATIVE, default_tools=True
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=spec))
    await expect(
        mesh.runs.StartRun(pb.StartRunRequest(agent_name="a", input="x")),
        IA,
        "UNSUPPORTED_CAPABILITY",
        "agent.output_strategy",
    )
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


async def test_start_run_sandbox_is_validated(mesh):
    # a good one runs: tests/service/runs/test_runs_sandbox.py
    bad = pb.StartRunRequest(agent=agent(), input="x", sandbox=pb.RunSandbox(user="nobody"))
    await expect(mesh.runs.StartRun(bad), IA, "UNSUPPORTED_CAPABILITY", "sandbox.user")
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


async def test_resume_results_with_unhonored_fields_are_refused_and_the_run_still_waits(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("mine", "{}")]), Reply(text="thanks")])
    spec = agent(tools=[pb.AgentTool(name="mine", spec=cpb.ToolSpec(external=True, description="mine"))])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    call = run.pending_calls[0].call

    def resume(**kw) -> pb.ResumeRunRequest:
        result = cpb.ToolResult(call_id=call.call_id, content="done", **kw)
        return pb.ResumeRunRequest(run_id=started.run_id, results=[result])

    await expect(
        mesh.runs.ResumeRun(resume(added_tools=["x y"])), IA, "INVALID_VALUE", "results[0].added_tools[0]"
    )
    await expect(
        mesh.runs.ResumeRun(resume(child_run_id="run_x")), IA, "INVALID_VALUE", "results[0].child_run_id"
    )
    assert (
        await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))
    ).run.status == cpb.RUN_STATUS_SUSPENDED
    await mesh.runs.ResumeRun(resume())
    done = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert done.final_output == "thanks"


async def test_stop_after_turn_checks_its_input_and_refuses_a_finished_run(mesh):
    await expect(mesh.runs.StopAfterTurn(pb.StopAfterTurnRequest()), IA, "MISSING_FIELD", "run_id")
    await expect(mesh.runs.StopAfterTurn(pb.StopAfterTurnRequest(run_id="bad id!")), IA, "INVALID_ID")
    await expect(mesh.runs.StopAfterTurn(pb.StopAfterTurnRequest(run_id="run_unknown")), NF, "RUN_NOT_FOUND")
    mesh.emu.script([Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    long = pb.StopAfterTurnRequest(run_id=started.run_id, reason="r" * 1025)
    await expect(mesh.runs.StopAfterTurn(long), IA, "INVALID_VALUE", "reason")
    await expect(
        mesh.runs.StopAfterTurn(pb.StopAfterTurnRequest(run_id=started.run_id)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "RUN_FINISHED",
    )
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED and not run.stop_requested


async def test_honored_overrides_run(mesh):
    # sequential (honored: it reaches the tool specs) and max_tool_concurrency 0 (unlimited)
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("list_files", "{}"), ToolCallReply("list_files", "{}")]),
            Reply(text="ok"),
        ]
    )
    spec = agent(
        tools=[pb.AgentTool(name="list_files", sequential=True, deferred=False)],
        limits=pb.AgentLimits(max_tool_concurrency=0),
        error_handlers=pb.ErrorHandlers(max_turns=pb.ErrorHandler(action=pb.ERROR_HANDLER_ACTION_FAIL)),
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "ok"
