"""A replica dies mid-run; another takes the expired lease over and continues from the log."""

from __future__ import annotations

import asyncio
import json
import os

import grpc

from agentrt.core.decide import mint_call_id
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.storage.db import sqlite_url
from agentrt.tools.config import ToolsConfig
from agentrt.tools.server import build_server as build_tools
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.ports import free_port
from tests.service.runs.harness import WAIT_S, agent, start_mesh, start_replica


def crash(server) -> None:
    """Stop a runs replica the way a killed process stops: no lease released, nothing recorded."""
    manager = server.manager
    manager._loop_task.cancel()
    for _, task in list(manager._executors.values()):
        task.cancel()


async def until(predicate, what: str):
    async def poll():
        while not await predicate():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), WAIT_S)
    except TimeoutError as exc:
        raise AssertionError(f"timed out waiting for {what}") from exc


async def test_takeover_continues_from_the_log(start_server, tmp_path, emulator):
    """The dead replica's command finishes in the tool service; the new owner attaches to it."""
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    cmd = json.dumps({"cmd": "sleep 1.5; echo line >> side.txt; echo finished"})
    emulator.script([Reply(tool_calls=[ToolCallReply("exec_command", cmd)]), Reply(text="recovered")])
    workspace = os.path.join(mesh.work, "takeover")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=workspace))
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))
    call_id = mint_call_id(started.run_id, 1, 0)

    async def tool_running() -> bool:
        got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED

    await until(tool_running, "the tool call to be running in the tool service")
    crash(mesh.runs_server)

    replica_b, stub = await start_replica(mesh, start_server)

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.final_output == "recovered"
    # the recorded model response of turn 1 was not requested again
    assert len(emulator.requests) == 2
    # the tool call outlived replica a: it finished in the tool service, and replica b's
    # repeat of the same call attached to it and got its real result; it ran once
    entries = await mesh.entries(started.session_id)
    result = [e.item.tool_result for e in entries if e.item.HasField("tool_result")][0]
    assert result.status == cpb.TOOL_RESULT_STATUS_OK and result.content == "finished\n"
    with open(os.path.join(workspace, "side.txt")) as f:
        assert f.read() == "line\n"
    assert "finished" in json.dumps(emulator.requests[-1][1])
    # one timeline across both replicas
    events = []
    async for msg in stub.StreamRunEvents(pb.StreamRunEventsRequest(run_id=started.run_id)):
        events.append(msg.event)
    # one timeline across both replicas: seqs only grow; what replica a may have shown and
    # never wrote (its reservation) is one explicit gap, never a seq given twice
    real = [e for e in events if e.WhichOneof("payload") != "gap"]
    assert [e.seq for e in real] == sorted({e.seq for e in real})
    gaps = [e.gap for e in events if e.WhichOneof("payload") == "gap"]
    assert len(gaps) <= 1 and all(g.next > g.last_good for g in gaps)
    assert events[-1].WhichOneof("payload") == "stream_end"
    # the takeover re-sent the call without announcing it again: one tool_called per call_id
    called = [e.tool_called.call.call_id for e in events if e.WhichOneof("payload") == "tool_called"]
    assert called == [call_id]
    returned = [e.tool_returned.result.call_id for e in events if e.WhichOneof("payload") == "tool_returned"]
    assert returned == [call_id]
    log = await replica_b.manager.store.read_log(started.run_id)
    responses = [p["turn"] for _, kind, p in log if kind == "model_responded"]
    assert responses == [1, 2]
    assert [kind for _, kind, _ in log].count("tools_started") == 2  # a's, then b's re-send


async def _take_over_with_tools_down(start_server, tmp_path, emulator, **runs_kw):
    """Replica a dies while a tool runs; replica b takes over with its tool service not up."""
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    emulator.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 2"}')]), Reply(text="recovered")]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    tools = tpb_grpc.ToolServiceStub(grpc.aio.insecure_channel(mesh.addresses["tools"]))
    call_id = mint_call_id(started.run_id, 1, 0)

    async def tool_running() -> bool:
        got = await tools.GetExecution(tpb.GetExecutionRequest(run_id=started.run_id, call_id=call_id))
        return got.state == tpb.EXECUTION_STATE_STARTED

    await until(tool_running, "the tool call to be running in the tool service")
    crash(mesh.runs_server)
    port = free_port()
    replica_b, stub = await start_replica(mesh, start_server, tools_address=f"127.0.0.1:{port}", **runs_kw)
    return mesh, started, replica_b, stub, port


async def test_takeover_waits_for_a_tool_service_that_is_not_up_yet(start_server, tmp_path, emulator):
    mesh, started, replica_b, stub, port = await _take_over_with_tools_down(start_server, tmp_path, emulator)

    async def refused() -> bool:
        return replica_b.manager.deps.peers.unavailable_waits > 0

    await until(refused, "replica b to find the tool service not up")
    await start_server(
        build_tools(
            ToolsConfig(
                server=ServerConfig(port=port, db_url=sqlite_url(mesh.tmp, "tools"), state_dir=mesh.tmp),
                workspace_root=mesh.workspace_root,
                heartbeat_seconds=0.5,
            )
        )
    )

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run once the tool service serves")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.final_output == "recovered"


async def test_takeover_fails_unavailable_when_the_peer_stays_down(start_server, tmp_path, emulator):
    _, started, _, stub, _ = await _take_over_with_tools_down(
        start_server, tmp_path, emulator, peer_unavailable_seconds=0.3
    )

    async def failed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_FAILED

    await until(failed, "the run to fail once the tool service stayed down past the bound")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.failure.kind == "unavailable"
    assert run.failure.retryable
    assert run.failure.reason == "DEPENDENCY_UNAVAILABLE"


async def test_a_drain_lets_the_model_call_in_flight_finish_so_it_is_never_asked_twice(
    start_server, tmp_path, emulator
):
    """Shutdown (SIGTERM's drain) during a model call: the call finishes and is logged, the
    lease is handed over, and the replica that continues never asks the model again."""
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    slow = Reply(
        text="x" * 60,
        tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo hi"}))],
        chunk_chars=2,
        event_delay=0.02,
    )

    def by_turn(path, body):  # turn 1: the slow tool turn, then the answer
        return Reply(text="after the drain") if "function_call_output" in json.dumps(body) else slow

    emulator.responder = by_turn
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))

    async def asked() -> bool:
        return len(emulator.requests) >= 1

    await until(asked, "the model call to be in flight")
    await mesh.runs_server.manager.stop(10)  # the close hook of a drain
    replica_b, stub = await start_replica(mesh, start_server)

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    turns = ["function_call_output" in json.dumps(b) for _, b in emulator.requests]
    assert turns == [False, True]  # turn 1 once (finished during the drain), turn 2 once


async def test_a_drain_shorter_than_the_model_call_still_releases_the_lease(start_server, tmp_path, emulator):
    """The drain's deadline comes while the model call streams: the run is cancelled, its lease
    released (not left to expire), and the replica that continues gets the call's answer from
    the gateway's journal, which finished it (tests/e2e/test_chaos_drain_handover.py: processes)."""
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=600, replica_id="replica-a")
    slow = Reply(text="x" * 200, chunk_chars=2, event_delay=0.03)  # about 3 s of stream
    emulator.responder = lambda path, body: slow
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    await mesh.events(started.run_id, until="model_delta")
    manager = mesh.runs_server.manager
    await manager.stop(0.1)  # the close hook of a drain of 0.1 s
    record = await manager.store.get_run(started.run_id)
    assert record is not None and record.status == cpb.RUN_STATUS_RUNNING
    assert (record.lease_owner, record.lease_expires_s) == ("", 0.0)  # released, not left to expire
    replica_b, stub = await start_replica(mesh, start_server, lease_seconds=600)

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.final_output == "x" * 200
    assert len(emulator.requests) == 1  # asked once: replica b's repeat was answered by the journal
    log = await replica_b.manager.store.read_log(started.run_id)
    assert [kind for _, kind, _ in log].count("model_responded") == 1
