"""Crashes, proven by kill -9 of real processes on PostgreSQL (issue 9 acceptance).

The chaos matrix: the runs process is killed with SIGKILL right after `model_responded` is
seen, while a side-effecting command runs (it appends a line to a file), right after
`tool_returned`, during an approval pause, and at a crash point no event shows (after the
session write of a turn, before its save point); once with a restart of the one replica and
once with a second replica taking over. In every cell: the emulator received each model
request exactly once, each line is in the file exactly once, the session has no duplicate
and no call without its result, the run completes, and the client following the run across
the crash (reconnecting from its last seq) never sees a seq come back as another event.

Then: a client connected while runs dies mid model stream, during tools and after a save
point gets every event once or an explicit gap, and the provider is asked each request once
(the gateway's model-call journal answers the new owner's repeat); a gateway killed mid-call
has that call asked again exactly once, by the next gateway after the dead one's journal
lease, and the run completes; a runs replica SIGSTOPped mid model call, within or past its
lease, keeps or loses its run by its fencing token with each request asked once; and the tools
service killed mid-command makes the run suspend for a reconciliation, after which "run it
again" runs the command exactly once more.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import grpc
import pytest
from chaos_helpers import (
    ChaosMesh,
    Follower,
    Replica,
    check_session,
    new_port,
    requests_of,
    session_entries,
)
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.core.handoffs import default_tool_name
from agentrt.runs.storage.store import lease_overlaps
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

POINTS = ("model_responded", "tool_running", "tool_returned", "approval", "after_session_write")


class Cells:
    """The emulator's responder: per cell (named in the run's input), a tool turn then an answer."""

    def __init__(self) -> None:
        self.slow: set[str] = set()

    def __call__(self, path: str, body):
        text = json.dumps(body)
        cell = next((c for c in text.split("cell:")[1:2]), "").split("\\")[0].split('"')[0]
        if not cell:
            return None
        if "function_call_output" in text:
            return Reply(text=f"finished {cell}")
        cmd = f"echo start-{cell} >> starts.txt; sleep 1.5; echo line-{cell} >> lines.txt; echo ok-{cell}"
        reply = Reply(
            text=f"running {cell}", tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))]
        )
        if cell in self.slow:
            reply.chunk_chars, reply.event_delay = 2, 0.05
        return reply


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    # The session's chaos mesh (conftest.py), reset; the cells share a second replica "b"
    # once one of them started it, as they did on a mesh of their own.
    return reset_chaos(shared_chaos, Cells(), keep=("b",))


async def _start(address: str, cell: str, workspace: Path, approval: bool) -> pb.StartRunResponse:
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command", needs_approval=True if approval else None)],
        limits=pb.AgentLimits(max_turns=4),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        return await pb_grpc.RunServiceStub(channel).StartRun(
            pb.StartRunRequest(agent=agent, input=f"do cell:{cell}", workspace=str(workspace))
        )


async def _until(predicate, what: str) -> None:
    async def poll() -> None:
        while not await predicate():
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), STATE_TIMEOUT)
    except TimeoutError as exc:
        raise AssertionError(f"timed out waiting for {what}") from exc


async def _get_run(addresses: list[str], run_id: str) -> pb.Run:
    for address in addresses:
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                return (await pb_grpc.RunServiceStub(channel).GetRun(pb.GetRunRequest(run_id=run_id))).run
        except grpc.aio.AioRpcError:
            continue
    raise AssertionError("no runs replica answered")


@pytest.mark.parametrize("mode", ["restart", "second"])
@pytest.mark.parametrize("point", POINTS)
async def test_chaos_matrix(chaos: ChaosMesh, tmp_path, point: str, mode: str):
    cell = f"{point}-{mode}".replace("_", "")
    a = chaos.replicas["a"]
    if point == "after_session_write":  # a replica that kills itself at that point
        chaos.kill(a)
        a = chaos.restart(a, {"AGENTRT_RUNS_CRASH_POINTS": "after_session_write"})
    b = chaos.replicas.get("b")
    if mode == "second" and (b is None or b.proc is None or b.proc.poll() is not None):
        b = chaos.spawn("runs", "b", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "b"})
    workspace = tmp_path / "ws"
    started = await _start(a.address, cell, workspace, approval=point == "approval")
    follower = Follower(started.run_id)
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(chaos.tools))

    if point == "tool_running":
        await follower.follow(a.address, until="tool_called")
        call_id = follower.order[-1].tool_called.call.call_id

        async def running() -> bool:
            got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
            return got.state == tpb.EXECUTION_STATE_STARTED and (workspace / "starts.txt").exists()

        await _until(running, "the command to run")
        chaos.kill(a)
    elif point == "after_session_write":  # nothing shows it: the replica dies on its own
        await follower.follow(a.address)
        assert a.proc is not None and a.proc.wait(STATE_TIMEOUT) == -9
    else:
        until = {"approval": "run_suspended"}.get(point, point)
        await follower.follow(a.address, until=until)
        chaos.kill(a)

    survivor = chaos.restart(a) if mode == "restart" else b
    assert survivor is not None
    if point == "approval":
        run = await _get_run([survivor.address], started.run_id)
        assert run.status == cpb.RUN_STATUS_SUSPENDED
        async with grpc.aio.insecure_channel(survivor.address) as channel:
            await pb_grpc.RunServiceStub(channel).ResumeRun(
                pb.ResumeRunRequest(
                    run_id=started.run_id,
                    decisions=[pb.ApprovalDecision(call_id=run.pending_calls[0].call.call_id, approved=True)],
                )
            )
    await follower.to_the_end([survivor.address])
    # the next cell starts on a live, plain replica a
    chaos.replicas["a"] = survivor if mode == "restart" else chaos.restart(a)

    run = await _get_run([survivor.address], started.run_id)
    assert run.status == cpb.RUN_STATUS_COMPLETED, (point, mode, run.failure)
    assert run.final_output == f"finished {cell}"
    asked = requests_of(chaos.emu, cell)
    assert len(asked) == 2 and len(set(asked)) == 2, f"model requests of {cell}: {len(asked)}"
    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
    entries = await session_entries(chaos.sessions, started.session_id)
    check_session(entries)
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert [r.status for r in results] == [cpb.TOOL_RESULT_STATUS_OK] and results[0].content == f"ok-{cell}\n"
    assert follower.order[-1].WhichOneof("payload") == "stream_end"


@pytest.mark.parametrize("point", ["model_delta", "tool_running", "items_persisted"])
async def test_a_subscriber_across_a_kill_sees_every_event_once_or_a_gap(
    chaos: ChaosMesh, tmp_path, point: str
):
    cell = f"sub{point}".replace("_", "")
    chaos.emu.responder.slow.add(cell)
    a = chaos.replicas["a"]
    workspace = tmp_path / "ws"
    started = await _start(a.address, cell, workspace, approval=False)
    follower = Follower(started.run_id)
    if point == "tool_running":
        await follower.follow(a.address, until="tool_called")
        await _until(lambda: asyncio.sleep(0, (workspace / "starts.txt").exists()), "the command to run")
    else:
        await follower.follow(a.address, until=point)
    chaos.kill(a)
    survivor = chaos.restart(a)
    chaos.replicas["a"] = survivor
    await follower.to_the_end([survivor.address])
    run = await _get_run([survivor.address], started.run_id)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    seqs = [e.seq for e in follower.order]
    assert seqs == sorted(set(seqs))  # every event once, in order; no seq twice (Follower checks content)
    for gap in follower.gaps:
        assert gap.next > gap.last_good and gap.dropped > 0
    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
    # killed mid model stream too, the provider was asked each request once: the gateway
    # finished the dead replica's call and journaled it; the new owner's repeat was replayed
    asked = requests_of(chaos.emu, cell)
    assert len(asked) == 2 and len(set(asked)) == 2, f"model requests of {cell}: {len(asked)}"


async def test_a_gateway_killed_mid_call_has_the_call_asked_again_once(chaos: ChaosMesh, tmp_path):
    cell = "gatewaykill"
    chaos.emu.responder.slow.add(cell)
    a = chaos.replicas["a"]
    workspace = tmp_path / "ws"
    started = await _start(a.address, cell, workspace, approval=False)
    follower = Follower(started.run_id)
    await follower.follow(a.address, until="model_delta")  # the gateway is streaming the call
    gateway = chaos.mesh.addresses["gateway"]
    chaos.kill(Replica("gateway", gateway, None, chaos.gateway_pid))
    killed_at = len(requests_of(chaos.emu, cell))
    chaos.gateway_pid = chaos.spawn("gateway", "gateway-2", int(gateway.rsplit(":", 1)[1])).pid
    await follower.to_the_end([a.address])
    run = await _get_run([a.address], started.run_id)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    asked = requests_of(chaos.emu, cell)
    # the dead gateway's call, asked again once by the new gateway after its lease; then turn 2
    assert killed_at == 1 and len(asked) == 3 and asked[0] == asked[1] and asked[2] != asked[0], asked
    assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
    check_session(await session_entries(chaos.sessions, started.session_id))
    takeovers = await _journal_takeovers(chaos, started.run_id)
    assert takeovers == [1, 0], takeovers  # turn 1 taken over from the dead holder once; turn 2 not


async def _journal_takeovers(chaos: ChaosMesh, run_id: str) -> list[int]:
    from sqlalchemy import text

    from agentrt.mesh.storage.db import Database

    db = Database(chaos.env["AGENTRT_GATEWAY_DB"])
    try:
        async with db.read() as conn:
            rows = await conn.execute(
                text(
                    "SELECT call_key, takeovers FROM gateway_model_calls "
                    "WHERE call_key LIKE :k ORDER BY call_key"
                ),
                {"k": f"{run_id}/turn-%"},
            )
            return [int(t) for _, t in rows.all()]
    finally:
        await db.close()


async def test_tools_killed_mid_command_suspends_for_reconciliation_then_runs_once_more(
    chaos: ChaosMesh, tmp_path
):
    a = chaos.replicas["a"]
    cmd = "echo ran >> lines.txt; test -e marker || { touch marker; sleep 60; }; echo finished"
    cell = "toolskill"

    def responder(path: str, body):
        text = json.dumps(body)
        if f"cell:{cell}" not in text:
            return base(path, body)
        if "function_call_output" in text:
            return Reply(text="reconciled")
        return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])

    base = chaos.emu.responder
    chaos.emu.responder = responder
    try:
        workspace = tmp_path / "ws"
        started = await _start(a.address, cell, workspace, approval=False)
        await _until(lambda: asyncio.sleep(0, (workspace / "marker").exists()), "the command to run")
        chaos.kill(chaos.home("tools"))
        chaos.spawn("tools", "tools-2", int(chaos.tools.rsplit(":", 1)[1]))
        await _until(
            lambda: _status(a.address, started.run_id, cpb.RUN_STATUS_SUSPENDED),
            "the run to wait for a reconciliation",
        )
        run = await _get_run([a.address], started.run_id)
        assert run.suspension_reason == pb.SUSPENSION_REASON_RECONCILIATION
        pending = run.pending_calls[0]
        assert pending.kind == pb.PENDING_CALL_KIND_RECONCILIATION
        async with grpc.aio.insecure_channel(a.address) as channel:
            await pb_grpc.RunServiceStub(channel).ResumeRun(
                pb.ResumeRunRequest(
                    run_id=started.run_id,
                    reconciliations=[
                        pb.Reconciliation(
                            call_id=pending.call.call_id, action=pb.RECONCILIATION_ACTION_RUN_AGAIN
                        )
                    ],
                )
            )
        await _until(
            lambda: _status(a.address, started.run_id, cpb.RUN_STATUS_COMPLETED), "the run to complete"
        )
        assert (workspace / "lines.txt").read_text() == "ran\nran\n"  # exactly once more
        assert len(requests_of(chaos.emu, cell)) == 2
        check_session(await session_entries(chaos.sessions, started.session_id))
    finally:
        chaos.emu.responder = base


async def _status(address: str, run_id: str, status: int) -> bool:
    return (await _get_run([address], run_id)).status == status


@pytest.mark.parametrize("stopped_s", [3.0, 8.0], ids=["within-the-lease", "past-the-lease"])
async def test_a_replica_stopped_mid_model_call_renews_by_its_fencing_token(
    chaos: ChaosMesh, tmp_path, stopped_s: float
):
    """SIGSTOP a runs replica mid model call, a second replica ready to take over (lease 6 s,
    renewed every 2 s). Stopped 3 s (past its renewal, within its lease): after SIGCONT it renews
    late, its fencing token still holds, nothing is taken over. Stopped 8 s (past its lease): the
    run is taken over (by the second replica or the mesh's own); the first, woken, finds its
    token superseded and stops without acting. Either way the provider is asked each request
    once and the command runs once."""
    cell = f"sigstop{int(stopped_s)}"
    chaos.emu.responder.slow.add(cell)
    lease = {"AGENTRT_RUNS_LEASE_SECONDS": "6"}
    s1 = chaos.spawn("runs", "s1", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "s1", **lease})
    s2 = chaos.spawn("runs", "s2", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "s2", **lease})
    try:
        workspace = tmp_path / "ws"
        started = await _start(s1.address, cell, workspace, approval=False)
        follower = Follower(started.run_id)
        await follower.follow(s1.address, until="model_delta")  # its model call is in flight
        os.kill(s1.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(stopped_s)  # the stimulus itself, not a wait for a state
        finally:
            os.kill(s1.pid, signal.SIGCONT)
        await follower.to_the_end([s2.address, s1.address])
        run = await _get_run([s2.address], started.run_id)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        asked = requests_of(chaos.emu, cell)
        assert len(asked) == 2 and len(set(asked)) == 2, f"model requests of {cell}: {len(asked)}"
        assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
        leases = await _leases(chaos, started.run_id)
        assert lease_overlaps(await _lease_log(chaos, started.run_id)) == []
        owners = [o for _, o in leases if o]  # an entry written after the release names no owner
        if stopped_s < 6:
            assert {t for t, _ in leases} == {1} and set(owners) == {"s1"}, leases  # no takeover
        else:
            # another replica (s2, or the mesh's a) took over with token 2; s1 stopped at its token
            takers = {o for t, o in leases if t == 2 and o}
            assert {t for t, _ in leases} == {1, 2} and len(takers) == 1 and "s1" not in takers, leases
    finally:
        for replica in (s1, s2):
            chaos.replicas.pop(replica.name, None)
            assert replica.proc is not None
            replica.proc.terminate()
            replica.proc.wait(30)


async def _lease_log(chaos: ChaosMesh, run_id: str) -> list[tuple[int, str, int, str]]:
    from agentrt.mesh.storage.db import Database
    from agentrt.runs.storage.store import RunStore

    db = Database(chaos.env["AGENTRT_RUNS_DB"])
    try:
        return await RunStore(db).log_leases(run_id)
    finally:
        await db.close()


async def _leases(chaos: ChaosMesh, run_id: str) -> list[tuple[int, str]]:
    return [(token, owner) for _, _, token, owner in await _lease_log(chaos, run_id)]


HANDOFF_TRIAGE, HANDOFF_BILLING = "You are triage: route the user.", "You are billing: answer invoices."


@pytest.mark.parametrize("mode", ["restart", "second"])
async def test_a_kill_mid_handoff_turn_hands_off_once(chaos: ChaosMesh, tmp_path, mode: str):
    """kill -9 while the regular tool of a handoff response runs (it runs before the handoff,
    004 §2.4): after the restart or takeover the command ran once, the handoff happened once,
    the target's turn asked the model with the target's instructions, and no request repeated."""
    cell = f"handoff{mode}"
    a = chaos.replicas["a"]
    b = chaos.replicas.get("b")
    if mode == "second" and (b is None or b.proc is None or b.proc.poll() is not None):
        b = chaos.spawn("runs", "b", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "b"})
    model = cpb.ModelRef(provider="openai", model="gpt-test")
    billing = pb.AgentSpec(
        name=f"billing-{cell}",
        model=model,
        instructions=HANDOFF_BILLING,
        tools=[pb.AgentTool(name="list_files")],
    )
    triage = pb.AgentSpec(
        name=f"triage-{cell}",
        model=model,
        instructions=HANDOFF_TRIAGE,
        tools=[pb.AgentTool(name="exec_command")],
        handoff_targets=[pb.Handoff(agent_name=billing.name)],
        limits=pb.AgentLimits(max_turns=4),
    )
    cmd = f"echo start >> starts.txt; sleep 1.5; echo line-{cell} >> lines.txt; echo ok"

    def responder(path: str, body):
        text = json.dumps(body)
        if f"cell:{cell}" not in text:
            return base(path, body)
        if HANDOFF_BILLING in text:
            return Reply(text=f"billing answers {cell}")
        return Reply(
            tool_calls=[
                ToolCallReply("exec_command", json.dumps({"cmd": cmd})),
                ToolCallReply(default_tool_name(billing.name), "{}"),
            ]
        )

    base = chaos.emu.responder
    chaos.emu.responder = responder
    try:
        async with grpc.aio.insecure_channel(a.address) as channel:
            stub = pb_grpc.RunServiceStub(channel)
            for spec in (billing, triage):
                await stub.RegisterAgent(pb.RegisterAgentRequest(agent=spec))
            workspace = tmp_path / "ws"
            started = await stub.StartRun(
                pb.StartRunRequest(
                    agent_name=triage.name, input=f"my invoice? cell:{cell}", workspace=str(workspace)
                )
            )
        follower = Follower(started.run_id)
        await follower.follow(a.address, until="tool_called")
        await _until(lambda: asyncio.sleep(0, (workspace / "starts.txt").exists()), "the command to run")
        chaos.kill(a)
        survivor = chaos.restart(a) if mode == "restart" else b
        assert survivor is not None
        await follower.to_the_end([survivor.address])
        chaos.replicas["a"] = survivor if mode == "restart" else chaos.restart(a)

        run = await _get_run([survivor.address], started.run_id)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        assert run.final_output == f"billing answers {cell}"
        assert run.current_agent_name == billing.name
        assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
        asked = [b for p, b in chaos.emu.requests if f"cell:{cell}" in json.dumps(b)]
        assert len(asked) == 2, f"model requests of {cell}: {len(asked)}"
        assert HANDOFF_TRIAGE in json.dumps(asked[0]) and HANDOFF_BILLING in json.dumps(asked[1])
        assert [t.get("name") for t in asked[1].get("tools") or []] == ["list_files"]
        handed = [e for e in follower.order if e.WhichOneof("payload") == "handoff_requested"]
        assert len(handed) == 1 and handed[0].handoff_requested.to_agent == billing.name
        entries = await session_entries(chaos.sessions, started.session_id)
        check_session(entries)
        agents = {(e.turn, e.item.agent) for e in entries if e.item.agent}
        assert {(1, triage.name), (2, billing.name)} <= agents
    finally:
        chaos.emu.responder = base


@pytest.mark.parametrize("mode", ["restart", "second"])
async def test_a_kill_mid_command_of_a_sandboxed_run_continues_in_its_sandbox(
    chaos: ChaosMesh, tmp_path, mode: str
):
    """kill -9 of the runs process while the first command of a sandboxed run runs: the run
    continues (restart or second replica) with the same Run.sandbox_id, the next command sees
    the sandbox's env and the file the first wrote, the first ran once, and the sandbox is
    destroyed at the end (issue 11 "Sandboxes for runs")."""
    cell = f"sandbox{mode}"
    a = chaos.replicas["a"]
    b = chaos.replicas.get("b")
    if mode == "second" and (b is None or b.proc is None or b.proc.poll() is not None):
        b = chaos.spawn("runs", "b", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "b"})
    first = f"echo start >> starts.txt; echo kept > note.txt; sleep 1.5; echo line-{cell} >> lines.txt"
    second = 'cat note.txt; echo "where=$WHERE"'

    def responder(path: str, body):
        text = json.dumps(body)
        if f"cell:{cell}" not in text:
            return base(path, body)
        done = text.count("function_call_output")
        if done >= 2:
            return Reply(text=f"finished {cell}")
        cmd = second if done == 1 else first
        return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": cmd}))])

    base = chaos.emu.responder
    chaos.emu.responder = responder
    try:
        workspace = tmp_path / "ws"
        async with grpc.aio.insecure_channel(a.address) as channel:
            stub = pb_grpc.RunServiceStub(channel)
            started = await stub.StartRun(
                pb.StartRunRequest(
                    agent=pb.AgentSpec(
                        model=cpb.ModelRef(provider="openai", model="gpt-test"),
                        tools=[pb.AgentTool(name="exec_command")],
                        limits=pb.AgentLimits(max_turns=4),
                    ),
                    input=f"do cell:{cell}",
                    workspace=str(workspace),
                    sandbox=pb.RunSandbox(backend=tpb.SANDBOX_BACKEND_LOCAL, env={"WHERE": cell}),
                )
            )
            sandbox_id = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run.sandbox_id
        assert sandbox_id
        follower = Follower(started.run_id)
        await follower.follow(a.address, until="tool_called")
        await _until(lambda: asyncio.sleep(0, (workspace / "starts.txt").exists()), "the command to run")
        chaos.kill(a)
        survivor = chaos.restart(a) if mode == "restart" else b
        assert survivor is not None
        await follower.to_the_end([survivor.address])
        chaos.replicas["a"] = survivor if mode == "restart" else chaos.restart(a)

        run = await _get_run([survivor.address], started.run_id)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        assert run.sandbox_id == sandbox_id
        assert (workspace / "starts.txt").read_text() == "start\n"  # the first command ran once
        assert (workspace / "lines.txt").read_text() == f"line-{cell}\n"
        entries = await session_entries(chaos.sessions, started.session_id)
        check_session(entries)
        outputs = [e.item.tool_result.content for e in entries if e.item.HasField("tool_result")]
        assert len(outputs) == 2 and "kept" in outputs[1] and f"where={cell}" in outputs[1], outputs
        asked = [b for p, b in chaos.emu.requests if f"cell:{cell}" in json.dumps(b)]
        assert len(asked) == 3, f"model requests of {cell}: {len(asked)}"

        async def released() -> bool:
            async with grpc.aio.insecure_channel(chaos.tools) as channel:
                got = await tpb_grpc.ToolServiceStub(channel).GetSandbox(
                    tpb.GetSandboxRequest(sandbox_id=sandbox_id)
                )
            return got.sandbox.state == tpb.SANDBOX_STATE_ABSENT

        await _until(released, "the sandbox to be released")
        assert (workspace / "note.txt").exists()  # the run's own workspace outlives its sandbox
    finally:
        chaos.emu.responder = base
