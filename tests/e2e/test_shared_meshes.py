"""The resets of the meshes the e2e tests share (shared_meshes.py): what a test leaves behind
(a run waiting for an approval, replies and requests in the emulator, killed services, extra
replicas, a gateway with other settings) is gone for the next test."""

from __future__ import annotations

import json

import grpc
import pytest
from chaos_helpers import ChaosMesh, Replica, new_port
from e2e_helpers import MESH_TOKEN, pid_alive, wait_for
from shared_meshes import reset_chaos, serving

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ProviderEmulator, Reply, ToolCallReply

pytestmark = pytest.mark.slow


def _suspended_run(address: str, workspace: str, metadata: list[tuple[str, str]], input_: str) -> str:
    """Start a run whose one command needs an approval; return its id once it is SUSPENDED."""
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command", needs_approval=True)],
    )
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.RunServiceStub(channel)
        started = stub.StartRun(
            pb.StartRunRequest(agent=agent, input=input_, workspace=workspace), metadata=metadata
        )

        def suspended() -> bool:
            run = stub.GetRun(pb.GetRunRequest(run_id=started.run_id), metadata=metadata).run
            return run.status == cpb.RUN_STATUS_SUSPENDED

        wait_for(suspended, "the run to wait for its approval")
    return started.run_id


def _status(address: str, run_id: str, metadata: list[tuple[str, str]]) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.RunServiceStub(channel)
        return stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=metadata).run.status


def test_the_emulator_reset_forgets_replies_requests_and_modes():
    with ProviderEmulator() as emu:
        emu.script([Reply(text="left over")])
        emu.responder = lambda path, body: None
        emu.token_count = 7
        emu._record("/v1/responses", {"input": "x"})
        emu.reset()
        assert (emu.pending, emu.requests, emu.intake) == (0, [], [])
        assert emu.responder is None and emu.token_count is None and emu.rate_limit is None


@pytest.mark.parametrize("which", ["emulated_mesh", "token_mesh"])
def test_a_mesh_reset_ends_the_runs_a_test_left(request, tmp_path, which):
    mesh = request.getfixturevalue(which)
    metadata = [("x-agentrt-tenant", "reset-check")]
    if mesh.token:
        assert mesh.token == MESH_TOKEN
        metadata.append(("authorization", f"Bearer {mesh.token}"))
    command = json.dumps({"cmd": "echo never > ran.txt"})
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("exec_command", command)]), Reply(text="unused")])
    run_id = _suspended_run(mesh.runs, str(tmp_path / "ws"), metadata, "left behind")

    mesh.reset()

    assert _status(mesh.runs, run_id, metadata) == cpb.RUN_STATUS_CANCELED
    assert mesh.emu.pending == 0 and mesh.emu.requests == []
    assert not (tmp_path / "ws" / "ran.txt").exists()


@pytest.mark.postgres
def test_the_chaos_reset_restores_its_topology_and_ends_left_runs(shared_chaos: ChaosMesh, tmp_path):
    def leave(path, body):
        if "cell:resetcheck" not in json.dumps(body):
            return None
        return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo never > ran.txt"}))])

    chaos = reset_chaos(shared_chaos, leave)
    home = dict(chaos.mesh.addresses)
    run_id = _suspended_run(chaos.replicas["a"].address, str(tmp_path / "ws"), [], "cell:resetcheck")
    # what a crash test may leave: its runs replica killed, a gateway of other settings in
    # place of the mesh's, a second plain replica, a replica with crash points
    chaos.kill(chaos.replicas["a"])
    old_gateway = chaos.gateway_pid
    chaos.kill(Replica("gateway", home["gateway"], None, old_gateway))
    gateway_port = int(home["gateway"].rsplit(":", 1)[1])
    odd = chaos.spawn("gateway", "gateway-odd", gateway_port, {"AGENTRT_LOG_LEVEL": "INFO"})
    b = chaos.spawn("runs", "b", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "b"})
    crash_points = {"AGENTRT_RUNS_CRASH_POINTS": "after_session_write"}
    crashy = chaos.spawn("runs", "c", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "c", **crash_points})
    assert odd.plain is False and b.plain is True and crashy.plain is False

    reset_chaos(chaos, None, keep=("b",))

    assert odd.proc is not None and odd.proc.poll() is not None  # the odd gateway ended
    assert crashy.proc is not None and crashy.proc.poll() is not None  # c is no kept name
    assert b.proc is not None and b.proc.poll() is None  # the kept plain replica stays
    assert set(chaos.replicas) == {"a", "b"} and chaos.replicas["a"].address == home["runs"]
    assert all(serving(address) for address in home.values())
    assert chaos.gateway_pid not in (old_gateway, odd.pid) and pid_alive(chaos.gateway_pid)
    assert _status(home["runs"], run_id, []) == cpb.RUN_STATUS_CANCELED
    assert chaos.emu.requests == [] and chaos.emu.responder is None
    assert not (tmp_path / "ws" / "ran.txt").exists()

    reset_chaos(chaos, None)  # keep nothing: b ends as well
    assert b.proc.poll() is not None and set(chaos.replicas) == {"a"}
