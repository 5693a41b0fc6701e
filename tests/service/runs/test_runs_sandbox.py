"""A run's sandbox (issue 11 "Sandboxes for runs"; 004 §2.7n–§2.7q) through the real mesh.

The run creates its sandbox through the real ToolService at its first tool batch, every
tool call of the run executes in it, a resume after approval (a new executor) adopts the
same one, and it is destroyed when the run ends. The local backend runs everywhere; the
docker tests use the real engine and the sandbox image (slow; they skip locally without
an engine and FAIL under CI, as tests/service/tools/test_tools_docker.py does).
"""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest

from agentrt.mesh.status import details_of
from agentrt.tools.config import DockerSettings
from agentrt.tools.docker.engine import OWNER_LABEL
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.needs import unavailable
from tests.service.runs.harness import WAIT_S, Mesh, agent, start_mesh

LOCAL, DOCKER = tpb.SANDBOX_BACKEND_LOCAL, tpb.SANDBOX_BACKEND_DOCKER
ABSENT, RUNNING = tpb.SANDBOX_STATE_ABSENT, tpb.SANDBOX_STATE_RUNNING
IMAGE = DockerSettings().image


def sh(cmd: str) -> ToolCallReply:
    return ToolCallReply("exec_command", json.dumps({"cmd": cmd}))


def tools(mesh: Mesh) -> tpb_grpc.ToolServiceStub:
    return tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))


async def sandbox_state(mesh: Mesh, sandbox_id: str) -> tpb.Sandbox:
    return (await tools(mesh).GetSandbox(tpb.GetSandboxRequest(sandbox_id=sandbox_id))).sandbox


async def released(mesh: Mesh, sandbox_id: str) -> None:
    """Wait until the tool service no longer has the sandbox (the run releases it once its
    end is stored, so right after GetRun says it ended it may still be going; WAIT_S bound)."""

    async def poll() -> None:
        while (await sandbox_state(mesh, sandbox_id)).state != ABSENT:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), WAIT_S)


async def outputs(mesh: Mesh, session_id: str) -> list[str]:
    """The tool results the session keeps, in order (content)."""
    entries = await mesh.entries(session_id)
    return [e.item.tool_result.content for e in entries if e.item.HasField("tool_result")]


async def start(mesh: Mesh, request: pb.StartRunRequest) -> pb.Run:
    """StartRun, then the run as GetRun reports it right away."""
    started = await mesh.runs.StartRun(request)
    return (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run


async def approve_pending(mesh: Mesh, run: pb.Run) -> None:
    decisions = [pb.ApprovalDecision(call_id=p.call.call_id, approved=True) for p in run.pending_calls]
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run.run_id, decisions=decisions))


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


# -- docker backend -----------------------------------------------------------------------------


def docker_api():
    import docker

    return docker.APIClient(version="auto", timeout=30)


def docker_problem() -> str:
    """Why the docker backend cannot be used here ("" when it can)."""
    try:
        docker_api().inspect_image(IMAGE)
    except Exception as exc:  # noqa: BLE001 - any failure is the reason
        return (
            f"docker engine or image {IMAGE} unavailable ({exc}); scripts/start-dockerd.sh and "
            "scripts/docker-sandbox-image.sh provide them"
        )
    return ""


def owned_containers(owner: str) -> list[dict[str, object]]:
    return docker_api().containers(all=True, filters={"label": f"{OWNER_LABEL}={owner}"})


def remove_owned(owner: str) -> None:
    """Remove what a test left; one the run is releasing itself may be gone already."""
    import docker

    for c in owned_containers(owner):
        try:
            docker_api().remove_container(c["Id"], force=True)
        except docker.errors.APIError as exc:
            if exc.status_code not in (404, 409):  # gone, or its removal in progress
                raise


@pytest.fixture
async def docker_mesh(start_server, tmp_path, emulator):
    """The mesh whose tool service labels its containers with this test's own owner."""
    problem = await asyncio.to_thread(docker_problem)
    if problem:
        unavailable(problem)
    owner = f"agentrt-test-{os.urandom(4).hex()}"
    mesh = await start_mesh(
        start_server, tmp_path, emulator, tools_kw={"docker": DockerSettings(owner=owner)}
    )
    mesh.docker_owner = owner  # type: ignore[attr-defined]
    try:
        yield mesh
    finally:
        await asyncio.to_thread(remove_owned, owner)


@pytest.mark.slow
async def test_a_runs_commands_run_in_its_container_offline_with_its_env(docker_mesh):
    mesh = docker_mesh
    assert not os.path.exists("/.agentrt")  # only the image has it
    mesh.emu.script(
        [
            Reply(
                tool_calls=[
                    sh('test -d /.agentrt && echo "in-the-image"; echo "token=$TOKEN"; ls /sys/class/net')
                ]
            ),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER, image=IMAGE, env={"TOKEN": "t-123"}),
        ),
    )
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    (out,) = await outputs(mesh, started.session_id)
    assert "in-the-image" in out and "token=t-123" in out, out
    # network off by default: the container has the loopback interface only
    assert out.split("token=t-123", 1)[1].split() == ["lo"], out
    await released(mesh, started.sandbox_id)
    assert await asyncio.to_thread(owned_containers, mesh.docker_owner) == []  # the container is gone


@pytest.mark.slow
async def test_a_resume_after_approval_uses_the_same_container(docker_mesh):
    mesh = docker_mesh
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo kept > /tmp/note; hostname")]),
            Reply(tool_calls=[sh("cat /tmp/note; hostname")]),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command", needs_approval=True)]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER),
        ),
    )
    for _ in range(2):
        run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
        await approve_pending(mesh, run)
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    first, second = await outputs(mesh, started.session_id)
    # /tmp is the container's own (not the workspace): the same container answered both calls
    assert "kept" in second, second
    assert first.split()[-1] == second.split()[-1], (first, second)
    await released(mesh, started.sandbox_id)
    assert await asyncio.to_thread(owned_containers, mesh.docker_owner) == []


# -- takeover -----------------------------------------------------------------------------------


async def _takeover(start_server, mesh: Mesh, backend: int, first: str, second: str) -> tuple[str, str]:
    """Crash the runs replica while the run's first command runs; a second replica takes the
    run over and runs the second command. Return both results."""
    from agentrt.core.decide import mint_call_id
    from agentrt.mesh.config import ServerConfig
    from agentrt.runs.config import RunsConfig
    from agentrt.runs.server import build_server as build_runs
    from agentrt.v1 import run_service_pb2_grpc as pb_grpc
    from tests.service.runs.test_runs_takeover import crash, until

    mesh.emu.script([Reply(tool_calls=[sh(first)]), Reply(tool_calls=[sh(second)]), Reply(text="done")])
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=backend),
        ),
    )
    call_id = mint_call_id(started.run_id, 1, 0)

    async def tool_running() -> bool:
        got = await tools(mesh).GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED

    await until(tool_running, "the first command to be running in the tool service")
    crash(mesh.runs_server)
    replica_b = build_runs(
        RunsConfig(
            server=ServerConfig(port=0, db_url=mesh.runs_server.config.db_url, state_dir=mesh.tmp),  # type: ignore[attr-defined]
            gateway_address=mesh.addresses["gateway"],
            tools_address=mesh.addresses["tools"],
            sessions_address=mesh.addresses["sessions"],
            tasks_address="",
            lease_seconds=0.6,
            replica_id="replica-b",
        )
    )
    stub = pb_grpc.RunServiceStub(grpc.aio.insecure_channel(await start_server(replica_b)))

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to complete the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.sandbox_id == started.sandbox_id
    await released(mesh, started.sandbox_id)
    one, two = await outputs(mesh, started.session_id)
    return one, two


async def test_a_takeover_continues_in_the_same_local_sandbox(start_server, tmp_path, emulator):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    one, two = await _takeover(
        start_server, mesh, LOCAL, "echo kept > note.txt; sleep 1; pwd", "cat note.txt; pwd"
    )
    assert "kept" in two and one.split()[-1] == two.split()[-1], (one, two)


@pytest.mark.slow
async def test_a_takeover_continues_in_the_same_container(start_server, tmp_path, emulator):
    problem = await asyncio.to_thread(docker_problem)
    if problem:
        unavailable(problem)
    owner = f"agentrt-test-{os.urandom(4).hex()}"
    mesh = await start_mesh(
        start_server,
        tmp_path,
        emulator,
        lease_seconds=0.6,
        replica_id="replica-a",
        tools_kw={"docker": DockerSettings(owner=owner)},
    )
    try:
        one, two = await _takeover(
            start_server, mesh, DOCKER, "echo kept > /tmp/note; sleep 1; hostname", "cat /tmp/note; hostname"
        )
        assert "kept" in two and one.split()[-1] == two.split()[-1], (one, two)
        assert await asyncio.to_thread(owned_containers, owner) == []
    finally:
        await asyncio.to_thread(remove_owned, owner)


async def test_a_drain_during_the_model_call_of_a_sandboxed_run_asks_the_model_once(
    start_server, tmp_path, emulator
):
    """The drain lets the model call finish; its response is logged before the sandbox is
    asked for, so the replica that continues runs the call in the sandbox, never asking again."""
    from agentrt.mesh.config import ServerConfig
    from agentrt.runs.config import RunsConfig
    from agentrt.runs.server import build_server as build_runs
    from agentrt.v1 import run_service_pb2_grpc as pb_grpc
    from tests.service.runs.test_runs_takeover import until

    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    slow = Reply(text="x" * 60, tool_calls=[sh('echo "in=$WHERE"')], chunk_chars=2, event_delay=0.02)

    def by_turn(path, body):
        return Reply(text="after the drain") if "function_call_output" in json.dumps(body) else slow

    emulator.responder = by_turn
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL, env={"WHERE": "the-sandbox"}),
        ),
    )

    async def asked() -> bool:
        return len(emulator.requests) >= 1

    await until(asked, "the model call to be in flight")
    await mesh.runs_server.manager.stop(10)  # type: ignore[attr-defined]
    replica_b = build_runs(
        RunsConfig(
            server=ServerConfig(port=0, db_url=mesh.runs_server.config.db_url, state_dir=mesh.tmp),  # type: ignore[attr-defined]
            gateway_address=mesh.addresses["gateway"],
            tools_address=mesh.addresses["tools"],
            sessions_address=mesh.addresses["sessions"],
            tasks_address="",
            lease_seconds=0.6,
            replica_id="replica-b",
        )
    )
    stub = pb_grpc.RunServiceStub(grpc.aio.insecure_channel(await start_server(replica_b)))

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    turns = ["function_call_output" in json.dumps(b) for _, b in emulator.requests]
    assert turns == [False, True]  # turn 1 once (finished during the drain), turn 2 once
    assert ["in=the-sandbox" in out for out in await outputs(mesh, started.session_id)] == [True]
    await released(mesh, started.sandbox_id)


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


async def test_a_release_the_tool_service_missed_is_retried_once_it_is_back(start_server, tmp_path, emulator):
    # The run ends while the tool service is down: the end is stored all the same, the
    # release is remembered, and the lease loop's retry destroys the sandbox once it serves.
    from agentrt.mesh.config import ServerConfig
    from agentrt.mesh.db import sqlite_url
    from agentrt.tools.config import ToolsConfig
    from agentrt.tools.server import build_server as build_tools

    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, peer_unavailable_seconds=0.3)
    mine = pb.AgentTool(name="mine", spec=cpb.ToolSpec(external=True, description="the client's"))
    mesh.emu.script(
        [
            Reply(tool_calls=[sh("echo ran")]),
            Reply(tool_calls=[ToolCallReply("mine", "{}")]),
            Reply(text="done"),
        ]
    )
    started = await start(
        mesh,
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command"), mine]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL),
        ),
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)  # waits on the client's tool
    assert (await sandbox_state(mesh, started.sandbox_id)).state == RUNNING
    await mesh.tools_server.stop(grace=0)  # type: ignore[attr-defined]
    result = cpb.ToolResult(call_id=run.pending_calls[0].call.call_id, name="mine", content="42")
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, results=[result]))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    releases = mesh.runs_server.manager.deps.releases  # type: ignore[attr-defined]

    async def pending() -> bool:
        return started.sandbox_id in releases.pending

    from tests.service.runs.test_runs_takeover import until

    await until(pending, "the missed release to be remembered")
    port = int(mesh.addresses["tools"].rsplit(":", 1)[1])
    await start_server(
        build_tools(
            ToolsConfig(
                server=ServerConfig(port=port, db_url=sqlite_url(mesh.tmp, "tools"), state_dir=mesh.tmp),
                workspace_root=mesh.workspace_root,
                heartbeat_seconds=0.5,
            )
        )
    )
    await released(mesh, started.sandbox_id)
    await until(lambda: asyncio.sleep(0, not releases.pending), "the retry to forget it")
