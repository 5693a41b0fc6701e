"""A run's sandbox (issue 11 "Sandboxes for runs"; 004 §2.7n–§2.7q) through the real mesh.

The run creates its sandbox through the real ToolService at its first tool batch, every
tool call of the run executes in it, a resume after approval (a new executor) adopts the
same one, and it is destroyed when the run ends (completed, failed, canceled). The local
backend, which runs everywhere; docker: test_runs_sandbox_docker.py; takeover, drain and a
missed release: test_runs_sandbox_recovery.py.
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
from agentrt.v1 import tool_service_pb2 as tpb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent
from tests.service.runs.sandbox_helpers import (
    ABSENT,
    DOCKER,
    LOCAL,
    RUNNING,
    approve_pending,
    outputs,
    released,
    sandbox_state,
    sh,
    start,
    tools,
)

# -- local backend ------------------------------------------------------------------------------


async def test_a_runs_commands_run_in_its_local_sandbox_with_its_env_then_it_is_released(mesh):
    mesh.emu.script([Reply(tool_calls=[sh('echo "greeting=$GREETING"; pwd')]), Reply(text="done")])
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL, env={"GREETING": "from-the-sandbox"}),
        ),
    )
    assert started.sandbox_id.startswith("sbx_")
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.sandbox_id == started.sandbox_id
    (out,) = await outputs(mesh, started.session_id)
    assert "greeting=from-the-sandbox" in out
    # the command ran in the sandbox's own workspace, not the run's default one
    assert os.path.join("sandboxes", started.sandbox_id) in out, out
    await released(mesh, started.sandbox_id)  # released at the end
    assert not os.path.exists(os.path.join(mesh.workspace_root, "default", "sandboxes", started.sandbox_id))


async def test_the_requests_sandbox_overrides_the_agents(mesh):
    mesh.emu.script([Reply(tool_calls=[sh('echo "who=$WHO"')]), Reply(text="done")])
    spec = agent(tools=[pb.AgentTool(name="exec_command")], sandbox=pb.RunSandbox(env={"WHO": "spec"}))
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=pb.AgentSpec(name="boxed", **_fields(spec))))
    by_spec = await start(mesh, pb.StartRunRequest(agent_name="boxed", input="go"))
    await mesh.wait_status(by_spec.run_id, cpb.RUN_STATUS_COMPLETED)
    assert "who=spec" in (await outputs(mesh, by_spec.session_id))[0]

    mesh.emu.script([Reply(tool_calls=[sh('echo "who=$WHO"')]), Reply(text="done")])
    by_request = await start(
        mesh,
        pb.StartRunRequest(agent_name="boxed", input="go", sandbox=pb.RunSandbox(env={"WHO": "request"})),
    )
    await mesh.wait_status(by_request.run_id, cpb.RUN_STATUS_COMPLETED)
    assert "who=request" in (await outputs(mesh, by_request.session_id))[0]
    assert by_spec.sandbox_id != by_request.sandbox_id


def _fields(spec: pb.AgentSpec) -> dict[str, object]:
    return {f.name: v for f, v in spec.ListFields()}


async def test_a_run_without_a_sandbox_has_none(mesh):
    mesh.emu.script([Reply(tool_calls=[sh("pwd")]), Reply(text="done")])
    started = await start(
        mesh, pb.StartRunRequest(agent=agent(tools=[pb.AgentTool(name="exec_command")]), input="go")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.sandbox_id == ""
    assert "sandboxes" not in (await outputs(mesh, started.session_id))[0]


async def test_a_resume_after_approval_uses_the_same_local_sandbox(mesh):
    # Two approvals: each ResumeRun starts a new executor, which must adopt the sandbox the
    # previous one created (the file written by the first call is read by the second).
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo kept > note.txt; pwd")]),
            Reply(tool_calls=[sh("cat note.txt; pwd")]),
            Reply(text="done"),
        ]
    )
    workspace = os.path.join(mesh.work, "boxed")
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)]),
            input="go",
            workspace=workspace,
            sandbox=pb.RunSandbox(backend=LOCAL),
        ),
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert (await sandbox_state(mesh, started.sandbox_id)).state == ABSENT  # created at the first batch
    await approve_pending(mesh, run)
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    box = await sandbox_state(mesh, started.sandbox_id)
    assert box.state == RUNNING and box.workspace == os.path.realpath(workspace)
    assert run.sandbox_id == started.sandbox_id
    await approve_pending(mesh, run)
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    first, second = await outputs(mesh, started.session_id)
    assert "kept" in second and os.path.realpath(workspace) in second and os.path.realpath(workspace) in first
    await released(mesh, started.sandbox_id)
    # the run's own workspace was given: releasing the sandbox leaves the files
    assert open(os.path.join(workspace, "note.txt")).read() == "kept\n"


async def test_canceling_a_suspended_run_releases_its_sandbox(mesh):
    spec = agent(
        tools=[pb.AgentTool(name="exec_command"), pb.AgentTool(name="write_file", needs_approval=True)]
    )
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo ran")]),
            Reply(tool_calls=[ToolCallReply("write_file", json.dumps({"path": "a", "content": "b"}))]),
            Reply(text="never"),
        ]
    )
    started = await start(
        mesh, pb.StartRunRequest(agent=spec, input="go", sandbox=pb.RunSandbox(backend=LOCAL))
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    assert (await sandbox_state(mesh, started.sandbox_id)).state == RUNNING
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="enough"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_CANCELED)
    await released(mesh, started.sandbox_id)


async def test_a_failed_run_releases_its_sandbox(mesh):
    # max_turns 1: the first turn's tools run, then the run fails on its turn budget
    mesh.emu.script([Reply(tool_calls=[sh("echo ran")]), Reply(text="never")])
    spec = agent(tools=[pb.AgentTool(name="exec_command")], limits=pb.AgentLimits(max_turns=1))
    started = await start(
        mesh, pb.StartRunRequest(agent=spec, input="go", sandbox=pb.RunSandbox(backend=LOCAL))
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "max_turns", run.failure
    assert "ran" in (await outputs(mesh, started.session_id))[0]
    await released(mesh, started.sandbox_id)


@pytest.mark.parametrize(
    ("sandbox", "reason", "field"),
    [
        (pb.RunSandbox(user="nobody"), "UNSUPPORTED_CAPABILITY", "sandbox.user"),
        (pb.RunSandbox(backend=DOCKER, network="host"), "INVALID_VALUE", "sandbox.network"),
        (pb.RunSandbox(env={"NO-DASH": "x"}), "INVALID_VALUE", "sandbox.env"),
        (pb.RunSandbox(env={"A": "nul\x00"}), "INVALID_VALUE", "sandbox.env"),
        (
            pb.RunSandbox(limits=tpb.SandboxLimits(cpu_seconds=-1)),
            "INVALID_VALUE",
            "sandbox.limits.cpu_seconds",
        ),
    ],
)
async def test_a_bad_sandbox_is_refused_and_nothing_is_stored(mesh, sandbox, reason, field):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", sandbox=sandbox))
    got, meta, _ = details_of(info.value)
    assert (info.value.code(), got, meta.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, reason, field)
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
    # the server keeps serving
    mesh.emu.script([Reply(text="fine")])
    ok = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(tools=[]), input="go"))
    await mesh.wait_status(ok.run_id, cpb.RUN_STATUS_COMPLETED)


async def test_a_sandbox_the_tool_service_refuses_fails_the_run_with_its_reason(mesh):
    # docker with no engine configured to answer: the tool service refuses the sandbox at the
    # first tool batch; the run fails `sandbox_unavailable`, not as a passing outage
    mesh.emu.script([Reply(tool_calls=[sh("echo never")]), Reply(text="never")])
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER, image="agentrt-no-such-image:0"),
        ),
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "sandbox_unavailable" and not run.failure.retryable, run.failure
    assert run.failure.reason == "SANDBOX_UNAVAILABLE", run.failure
    assert "sandbox could not be created" in run.failure.message
    # the committed call got its one result, recorded with the turn, then the run failed
    assert await outputs(mesh, started.session_id) == [
        "Not executed: the run's sandbox could not be created."
    ]
    events = await mesh.events(started.run_id)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.index("tool_called") < kinds.index("tool_returned") < kinds.index("run_completed")


async def test_a_handoff_keeps_the_runs_sandbox(mesh):
    # the target's own `sandbox` is not consulted mid-run: the sandbox is the run's
    billing = agent(
        name="billing",
        tools=[pb.AgentTool(name="exec_command")],
        sandbox=pb.RunSandbox(env={"WHERE": "billing-spec"}),
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=billing))
    triage = agent(name="triage", tools=[pb.AgentTool(name="exec_command")], handoffs=["billing"])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=triage))
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo kept > note.txt"), ToolCallReply("transfer_to_billing", "{}")]),
            Reply(tool_calls=[sh('cat note.txt; echo "where=$WHERE"')]),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent_name="triage", input="go", sandbox=pb.RunSandbox(backend=LOCAL, env={"WHERE": "the-run"})
        ),
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.current_agent_name == "billing", run.failure
    assert run.sandbox_id == started.sandbox_id
    outs = await outputs(mesh, started.session_id)
    cat = outs[-1]
    assert "kept" in cat and "where=the-run" in cat, outs
    await released(mesh, started.sandbox_id)


async def test_canceling_a_run_mid_command_releases_its_sandbox(mesh):
    from agentrt.core.decide import mint_call_id

    mesh.emu.script([Reply(tool_calls=[sh("sleep 60")]), Reply(text="never")])
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL),
        ),
    )
    call_id = mint_call_id(started.run_id, 1, 0)

    async def running() -> None:
        while True:
            got = await tools(mesh).GetExecution(
                tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id)
            )
            if got.state == tpb.EXECUTION_STATE_STARTED:
                return
            await asyncio.sleep(0.02)

    await asyncio.wait_for(running(), 30)
    assert (await sandbox_state(mesh, started.sandbox_id)).state == RUNNING
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="enough"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_CANCELED)
    await released(mesh, started.sandbox_id)
    (out,) = await outputs(mesh, started.session_id)
    assert "Cancelled while running" in out, out
