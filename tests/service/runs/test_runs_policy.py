"""The command policy is checked before the approval gate (004 §2.7j, §2.7l), through the real mesh."""

from __future__ import annotations

import json
import os

import grpc
import pytest

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent

DENY = r"rm\s+-rf"
#: Exponential backtracking: unaided, searching it in CATASTROPHIC_CMD would never end.
CATASTROPHIC = r"(a|a)+$"
CATASTROPHIC_CMD = "echo " + "a" * 64 + "b > made.txt"


def policed_agent(deny: tuple[str, ...] = (DENY,), **kw) -> pb.AgentSpec:
    tools = [
        pb.AgentTool(
            name="exec_command",
            needs_approval=True,
            command_policy=cpb.CommandPolicy(allow=[r"^(echo|rm|touch) "], deny=deny),
        )
    ]
    return agent(tools=tools, **kw)


async def start(
    mesh, *commands: dict | str, name: str = "ws", deny: tuple[str, ...] = (DENY,)
) -> tuple[pb.StartRunResponse, str]:
    calls = [ToolCallReply("exec_command", c if isinstance(c, str) else json.dumps(c)) for c in commands]
    mesh.emu.script([Reply(tool_calls=calls), Reply(text="done")])
    workspace = os.path.join(mesh.work, name)
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=policed_agent(deny), input="go", workspace=workspace)
    )
    return started, workspace


async def tool_results(mesh, session_id: str) -> list[cpb.ToolResult]:
    return [e.item.tool_result for e in await mesh.entries(session_id) if e.item.HasField("tool_result")]


async def test_denied_command_never_waits_for_approval_and_the_model_sees_the_rule(mesh):
    started, workspace = await start(mesh, {"cmd": "rm -rf build && touch gone.txt"})
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_SUSPENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and not run.pending_calls
    kinds = [e.WhichOneof("payload") for e in await mesh.events(started.run_id)]
    assert "run_suspended" not in kinds
    (result,) = await tool_results(mesh, started.session_id)
    assert result.status == cpb.TOOL_RESULT_STATUS_DENIED and result.is_error
    assert f'"{DENY}"' in result.content
    details = json.loads(result.details_json)
    assert (details["reason"], details["rule"], details["pattern"]) == ("POLICY_DENIED", "deny", DENY)
    assert not os.path.exists(os.path.join(workspace, "gone.txt"))
    # the model's next request carries the refusal naming the rule
    assert DENY.replace("\\", "\\\\") in json.dumps(mesh.emu.requests[-1][1])


async def test_command_outside_the_allow_list_never_waits_either(mesh):
    started, _ = await start(mesh, {"cmd": "curl http://example.com"})
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_SUSPENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED
    (result,) = await tool_results(mesh, started.session_id)
    assert json.loads(result.details_json)["rule"] == "allow"


async def test_allowed_command_still_waits_for_approval(mesh):
    started, workspace = await start(mesh, {"cmd": "touch made.txt"})
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    assert [p.kind for p in run.pending_calls] == [pb.PENDING_CALL_KIND_APPROVAL]
    assert not os.path.exists(os.path.join(workspace, "made.txt"))
    call_id = run.pending_calls[0].call.call_id
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
        )
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert os.path.exists(os.path.join(workspace, "made.txt"))


async def test_a_mixed_turn_asks_only_about_the_allowed_call(mesh):
    started, workspace = await start(mesh, {"cmd": "rm -rf /"}, {"cmd": "echo ok > ok.txt"})
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    (pending,) = run.pending_calls
    assert json.loads(pending.call.arguments) == {"cmd": "echo ok > ok.txt"}
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id,
            decisions=[pb.ApprovalDecision(call_id=pending.call.call_id, approved=True)],
        )
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    denied, ran = await tool_results(mesh, started.session_id)
    assert denied.status == cpb.TOOL_RESULT_STATUS_DENIED and ran.status == cpb.TOOL_RESULT_STATUS_OK
    assert os.path.exists(os.path.join(workspace, "ok.txt"))


async def test_undecodable_arguments_never_wait_for_approval(mesh):
    started, workspace = await start(mesh, {"cmd": "touch w.txt", "workdir": True})
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_SUSPENDED)
    assert run.status == cpb.RUN_STATUS_COMPLETED
    (result,) = await tool_results(mesh, started.session_id)
    assert result.is_error and result.status == cpb.TOOL_RESULT_STATUS_ERROR
    # refused by the run loop's check against the tool's whole schema (004 §2.7h), before
    # the approval gate and before the tool service, naming the offending argument
    assert json.loads(result.details_json) == {"source": "runtime"} and "/workdir" in result.content
    assert not os.path.exists(os.path.join(workspace, "w.txt"))


async def test_a_catastrophic_deny_pattern_does_not_wedge_the_run(mesh):
    # The run loop's check runs out of time: no proof the tool service will refuse, so the
    # call asks (skipping approval on a timeout could run a command nobody approved, should
    # the tool service's own check finish in time). The tool service then refuses it, naming
    # the pattern; the other calls of the turn are judged as usual.
    started, workspace = await start(
        mesh,
        {"cmd": CATASTROPHIC_CMD},
        {"cmd": "rm -rf " + "a" * 64 + "b"},  # an earlier deny pattern decides first: definite
        {"cmd": "curl " + "a" * 64 + "b"},  # outside the allow list: definite
        deny=(DENY, CATASTROPHIC),
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    (pending,) = run.pending_calls
    assert json.loads(pending.call.arguments) == {"cmd": CATASTROPHIC_CMD}
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id,
            decisions=[pb.ApprovalDecision(call_id=pending.call.call_id, approved=True)],
        )
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    slow, denied, outside = await tool_results(mesh, started.session_id)
    assert slow.status == cpb.TOOL_RESULT_STATUS_DENIED and slow.is_error
    assert f'deny pattern "{CATASTROPHIC}" took too long to evaluate' in slow.content
    assert (json.loads(slow.details_json)["rule"], json.loads(slow.details_json)["pattern"]) == (
        "timeout",
        CATASTROPHIC,
    )
    assert json.loads(denied.details_json)["pattern"] == DENY
    assert json.loads(outside.details_json)["rule"] == "allow"
    assert not os.path.exists(os.path.join(workspace, "made.txt"))
    # the model is told which pattern stopped it
    assert "took too long to evaluate" in json.dumps(mesh.emu.requests[-1][1])


async def test_a_catastrophic_pattern_is_validated_like_any_other(mesh):
    # it compiles, so RegisterAgent accepts it; the limits are checked instead
    spec = policed_agent((DENY, CATASTROPHIC))
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=pb.AgentSpec(name="slow", **_fields(spec))))
    many = bad_policy_agent(cpb.CommandPolicy(deny=["rm"] * 257))
    with pytest.raises(grpc.RpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=many, input="go"))
    assert reason_of(info.value) == "INVALID_VALUE"
    assert "command_policy.deny: 257 patterns, more than the limit of 256" in info.value.details()
    assert "does not compile" not in info.value.details()
    assert details_of(info.value)[1]["field"] == "agent.tools[0].command_policy.deny"


def bad_policy_agent(policy: cpb.CommandPolicy, tool: str = "exec_command", **kw) -> pb.AgentSpec:
    return agent(tools=[pb.AgentTool(name=tool, command_policy=policy)], **kw)


@pytest.mark.parametrize(
    "spec,needle",
    [
        (bad_policy_agent(cpb.CommandPolicy(deny=["ok", "(unclosed"])), "(unclosed"),
        (bad_policy_agent(cpb.CommandPolicy(allow=["[z-a]"])), "[z-a]"),
        (bad_policy_agent(cpb.CommandPolicy(allow=["^ls[[:space:]]"])), "POSIX class"),
        (bad_policy_agent(cpb.CommandPolicy(deny=["rm"]), tool="read_file"), "exec_command tool only"),
    ],
)
async def test_bad_policies_are_refused_at_register_and_start(mesh, spec, needle):
    for call in (
        mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=pb.AgentSpec(name="pol", **_fields(spec)))),
        mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go")),
    ):
        with pytest.raises(grpc.RpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(info.value) == "INVALID_VALUE"
        assert needle in info.value.details() and "tools[0]" in info.value.details()
    assert not mesh.emu.requests  # nothing started
    with pytest.raises(grpc.RpcError) as info:
        await mesh.runs.GetAgent(pb.GetAgentRequest(name="pol"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def _fields(spec: pb.AgentSpec) -> dict:
    return {"model": spec.model, "tools": spec.tools}
