"""Bad input to every RunService RPC: a status with a reason, nothing changes, still serving."""

from __future__ import annotations

import grpc
import pytest

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.harness import agent

IA, NF, FP, UN = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNIMPLEMENTED,
)
TOOL_SCHEMA_BAD = pb.AgentTool(name="mine", spec=cpb.ToolSpec(external=True, parameters_json_schema="{nope"))

CASES = [
    ("RegisterAgent", pb.RegisterAgentRequest(), IA, "MISSING_FIELD"),
    ("RegisterAgent", pb.RegisterAgentRequest(agent=pb.AgentSpec()), IA, "INVALID_AGENT"),
    ("RegisterAgent", pb.RegisterAgentRequest(agent=pb.AgentSpec(name="bad name!")), IA, "INVALID_AGENT"),
    (
        "RegisterAgent",
        pb.RegisterAgentRequest(agent=pb.AgentSpec(name="a", output_json_schema="{")),
        IA,
        "INVALID_JSON",
    ),
    (
        "RegisterAgent",
        pb.RegisterAgentRequest(agent=pb.AgentSpec(name="a", tools=[TOOL_SCHEMA_BAD])),
        IA,
        "INVALID_JSON",
    ),
    (
        "RegisterAgent",
        pb.RegisterAgentRequest(agent=pb.AgentSpec(name="a", tools=[pb.AgentTool(name="x y")])),
        IA,
        "INVALID_AGENT",
    ),
    (
        "RegisterAgent",
        pb.RegisterAgentRequest(agent=pb.AgentSpec(name="a", limits=pb.AgentLimits(max_turns=-1))),
        IA,
        "INVALID_VALUE",
    ),
    (  # an agent tool naming an agent that is not registered (004 §2.8)
        "StartRun",
        pb.StartRunRequest(
            agent=pb.AgentSpec(name="a", tools=[pb.AgentTool(name="ask", agent_name="b")]), input="x"
        ),
        IA,
        "UNKNOWN_AGENT",
    ),
    ("GetAgent", pb.GetAgentRequest(), IA, "MISSING_FIELD"),
    ("GetAgent", pb.GetAgentRequest(name="nobody"), NF, "AGENT_NOT_FOUND"),
    ("GetAgent", pb.GetAgentRequest(name="a", version=-1), IA, "INVALID_VALUE"),
    ("StartRun", pb.StartRunRequest(input="x"), IA, "MISSING_FIELD"),
    ("StartRun", pb.StartRunRequest(agent_name="bad name!", input="x"), IA, "INVALID_AGENT"),
    ("StartRun", pb.StartRunRequest(agent_name="nobody", input="x"), NF, "AGENT_NOT_FOUND"),
    ("StartRun", pb.StartRunRequest(agent_name="nobody", agent_version=-2, input="x"), IA, "INVALID_VALUE"),
    ("StartRun", pb.StartRunRequest(agent=agent()), IA, "MISSING_FIELD"),
    (
        "StartRun",
        pb.StartRunRequest(agent=agent(), input="x", session_id="ses_missing"),
        NF,
        "SESSION_NOT_FOUND",
    ),
    ("StartRun", pb.StartRunRequest(agent=agent(), input="x", session_id="bad id!"), IA, "INVALID_ID"),
    ("StartRun", pb.StartRunRequest(agent=agent(), input="x", workspace="relative/dir"), IA, "INVALID_VALUE"),
    (
        "StartRun",
        pb.StartRunRequest(agent=agent(tools=[pb.AgentTool(name="teleport")]), input="x"),
        IA,
        "UNKNOWN_TOOL",
    ),
    ("StartRun", pb.StartRunRequest(agent=agent(output_json_schema="[1,"), input="x"), IA, "INVALID_JSON"),
    (
        "StartRun",
        pb.StartRunRequest(agent=agent(limits=pb.AgentLimits(max_tool_concurrency=-3)), input="x"),
        IA,
        "INVALID_VALUE",
    ),
    ("StartRun", pb.StartRunRequest(agent=agent(result_max_bytes=-1), input="x"), IA, "INVALID_VALUE"),
    ("GetRun", pb.GetRunRequest(), IA, "MISSING_FIELD"),
    ("GetRun", pb.GetRunRequest(run_id="bad id!"), IA, "INVALID_ID"),
    ("GetRun", pb.GetRunRequest(run_id="run_unknown"), NF, "RUN_NOT_FOUND"),
    ("ListRuns", pb.ListRunsRequest(page_size=-1), IA, "INVALID_VALUE"),
    ("ListRuns", pb.ListRunsRequest(page_size=5000), IA, "INVALID_VALUE"),
    ("ListRuns", pb.ListRunsRequest(page_token="!!"), IA, "INVALID_VALUE"),
    ("ResumeRun", pb.ResumeRunRequest(), IA, "MISSING_FIELD"),
    ("ResumeRun", pb.ResumeRunRequest(run_id="run_unknown"), NF, "RUN_NOT_FOUND"),
    ("CancelRun", pb.CancelRunRequest(), IA, "MISSING_FIELD"),
    ("CancelRun", pb.CancelRunRequest(run_id="run_unknown"), NF, "RUN_NOT_FOUND"),
    (
        "InjectInput",
        pb.InjectInputRequest(run_id="run_unknown", kind=pb.INJECTION_KIND_STEER),
        IA,
        "MISSING_FIELD",
    ),
    ("InjectInput", pb.InjectInputRequest(run_id="run_unknown", text="x"), IA, "INVALID_VALUE"),
    (
        "InjectInput",
        pb.InjectInputRequest(run_id="run_unknown", text="x", kind=pb.INJECTION_KIND_STEER),
        NF,
        "RUN_NOT_FOUND",
    ),
]


async def still_serving(mesh):
    await mesh.runs.ListRuns(pb.ListRunsRequest())


async def test_bad_input(mesh):
    # one mesh for every case: each answers its status + reason and the server keeps serving
    for method, request_, code, reason in CASES:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await getattr(mesh.runs, method)(request_)
        got = (info.value.code(), reason_of(info.value))
        assert got == (code, reason), f"{method}({request_}): {info.value.details()}"
        assert info.value.details()
        await still_serving(mesh)
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []  # nothing was recorded


STREAM_CASES = [
    (pb.StreamRunEventsRequest(), IA, "MISSING_FIELD"),
    (pb.StreamRunEventsRequest(run_id="run_a", session_id="ses_b"), IA, "INVALID_VALUE"),
    (pb.StreamRunEventsRequest(run_id="run_unknown"), NF, "RUN_NOT_FOUND"),
    (pb.StreamRunEventsRequest(session_id="ses_unknown"), NF, "SESSION_NOT_FOUND"),
    (pb.StreamRunEventsRequest(session_id="bad id!"), IA, "INVALID_ID"),
    (pb.StreamRunEventsRequest(run_id="run_a", after_seq=-5), IA, "INVALID_VALUE"),
]


async def test_bad_stream_requests(mesh):
    for request_, code, reason in STREAM_CASES:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in mesh.runs.StreamRunEvents(request_):
                pass
        assert (info.value.code(), reason_of(info.value)) == (code, reason), str(request_)
        await still_serving(mesh)


async def test_another_tenants_run_is_not_found(mesh):
    mesh.emu.script([Reply(text="mine")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    other = [("x-agentrt-tenant", "other")]
    calls = [
        mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id), metadata=other),
        mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id), metadata=other),
        mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id), metadata=other),
        mesh.runs.InjectInput(
            pb.InjectInputRequest(run_id=started.run_id, text="x", kind=pb.INJECTION_KIND_STEER),
            metadata=other,
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert (info.value.code(), reason_of(info.value)) == (NF, "RUN_NOT_FOUND")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in mesh.runs.StreamRunEvents(
            pb.StreamRunEventsRequest(run_id=started.run_id), metadata=other
        ):
            pass
    assert reason_of(info.value) == "RUN_NOT_FOUND"
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest(), metadata=other)).runs == []
    # the other tenant cannot continue this tenant's session either
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(
            pb.StartRunRequest(agent=agent(), input="x", session_id=started.session_id), metadata=other
        )
    assert reason_of(info.value) == "SESSION_NOT_FOUND"


async def test_non_utf8_request_is_invalid(mesh):
    channel = grpc.aio.insecure_channel(mesh.runs_address)
    call = channel.unary_unary(
        "/agentrt.v1.RunService/GetRun", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(bytes([0x0A, 0x02, 0xFF, 0xFE]))
    assert info.value.code() == IA and reason_of(info.value) == "INVALID_UTF8"
    await channel.close()
    await still_serving(mesh)


async def test_state_preconditions(mesh):
    mesh.emu.script([Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    for call, reason in [
        (mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id)), "RUN_FINISHED"),
        (mesh.runs.InjectInput(pb.InjectInputRequest(run_id=started.run_id, text="more",
                                                     kind=pb.INJECTION_KIND_FOLLOW_UP)), "RUN_FINISHED"),
    ]:  # fmt: skip
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert (info.value.code(), reason_of(info.value)) == (FP, reason)


def _settings(**kw: object) -> cpb.ModelSettings:
    return cpb.ModelSettings(**kw)  # type: ignore[arg-type]


NAMED = cpb.TOOL_CHOICE_MODE_NAMED
CHOICE = "settings.tool_choice"
#: (spec fields, reason, metadata field without the "agent." prefix)
BAD_SPECS = [
    ({"model": cpb.ModelRef(provider="openia", model="gpt")}, "INVALID_AGENT", "model.provider"),
    ({"settings": _settings(temperature=float("nan"))}, "INVALID_VALUE", "settings.temperature"),
    ({"settings": _settings(temperature=float("inf"))}, "INVALID_VALUE", "settings.temperature"),
    ({"settings": _settings(temperature=2.5)}, "INVALID_VALUE", "settings.temperature"),
    ({"settings": _settings(temperature=-0.1)}, "INVALID_VALUE", "settings.temperature"),
    ({"settings": _settings(top_p=1.5)}, "INVALID_VALUE", "settings.top_p"),
    ({"settings": _settings(top_p=float("nan"))}, "INVALID_VALUE", "settings.top_p"),
    ({"settings": _settings(max_output_tokens=-1)}, "INVALID_VALUE", "settings.max_output_tokens"),
    ({"settings": _settings(output_json_schema="[")}, "INVALID_JSON", "settings.output_json_schema"),
    ({"settings": _settings(tool_choice=cpb.ToolChoice(mode=NAMED))}, "INVALID_VALUE", f"{CHOICE}.name"),
    (
        {"settings": _settings(tool_choice=cpb.ToolChoice(mode=NAMED, name="write_file")),
         "tools": [pb.AgentTool(name="read_file")]},
        "INVALID_VALUE",
        "settings.tool_choice.name",
    ),
    ({"settings": _settings(tool_choice=cpb.ToolChoice(mode=99))}, "INVALID_VALUE", f"{CHOICE}.mode"),
    ({"tool_call_mode": 7}, "INVALID_VALUE", "tool_call_mode"),
    (
        {"tools": [pb.AgentTool(name="read_file", timeout={"seconds": -1})]},
        "INVALID_VALUE",
        "tools[0].timeout",
    ),
]  # fmt: skip


async def test_bad_agent_specs_are_refused_up_front(mesh):
    # RegisterAgent and StartRun refuse the spec; no run is created that would fail later
    for fields, reason, field in BAD_SPECS:
        spec = pb.AgentSpec(name="a", **fields)  # type: ignore[arg-type]
        for method, request_ in (
            ("RegisterAgent", pb.RegisterAgentRequest(agent=spec)),
            ("StartRun", pb.StartRunRequest(agent=spec, input="x")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await getattr(mesh.runs, method)(request_)
            got_reason, meta, _ = details_of(info.value)
            assert (info.value.code(), got_reason) == (IA, reason), (
                f"{method}({fields}): {info.value.details()}"
            )
            assert meta.get("field") == f"agent.{field}", (method, fields, meta)
            await still_serving(mesh)
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


async def test_named_tool_choice_is_checked_against_the_default_tools(mesh):
    # an agent that lists no tools gets the default ones; a NAMED choice must name one of them
    choice = cpb.ToolChoice(mode=NAMED, name="teleport")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(
            pb.StartRunRequest(agent=agent(settings=_settings(tool_choice=choice)), input="x")
        )
    assert (info.value.code(), reason_of(info.value)) == (IA, "INVALID_VALUE")
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
    mesh.emu.script([Reply(text="done")])
    choice = cpb.ToolChoice(mode=NAMED, name="read_file")
    good = agent(settings=_settings(tool_choice=choice, temperature=0.0, top_p=1.0, max_output_tokens=64))
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=good, input="x"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
