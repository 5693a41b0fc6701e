"""Two answers to one suspended run arriving at once (two `agentrt reconcile` racing).

Each ResumeRun reads the run, merges its answer into the answers it read, and writes the
run back. On an idle SQLite the read and the write happen without the event loop switching
requests; a slow store (PostgreSQL under load) opens a window between them, which these
tests widen by slowing RunManager.get_run (the read every ResumeRun begins with). Two
requests answering two calls must both count; two answering one call must not both be
accepted. Both were accepted before, one's answer lost.
"""

from __future__ import annotations

import asyncio

import grpc

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.service.runs.harness import Mesh
from tests.service.runs.test_runs_reconcile import lines_of, waiting_for_reconciliations


def slow_reads(mesh: Mesh) -> None:
    """Make every run read of the RunService pause before its answer is used."""
    manager = mesh.runs_server.manager  # type: ignore[attr-defined]
    read = manager.get_run

    async def slow(tenant: str, run_id: str):  # type: ignore[no-untyped-def]
        record = await read(tenant, run_id)
        await asyncio.sleep(0.05)  # the other request reads meanwhile (not an assertion)
        return record

    manager.get_run = slow


async def answer_at_once(mesh: Mesh, run_id: str, answers: list[pb.Reconciliation]) -> list[object]:
    return await asyncio.gather(
        *(mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=run_id, reconciliations=[a])) for a in answers),
        return_exceptions=True,
    )


async def test_two_calls_answered_at_once_both_count(start_server, tmp_path, emulator):
    mesh, run_id, workspace, (first, second) = await waiting_for_reconciliations(
        start_server, tmp_path, emulator, 2
    )
    slow_reads(mesh)
    outcomes = await answer_at_once(
        mesh,
        run_id,
        [
            pb.Reconciliation(call_id=first, action=pb.RECONCILIATION_ACTION_FAIL, message="rolled back 0"),
            pb.Reconciliation(call_id=second, action=pb.RECONCILIATION_ACTION_FAIL, message="rolled back 1"),
        ],
    )
    assert all(isinstance(o, pb.ResumeRunResponse) for o in outcomes), outcomes
    run = await mesh.wait_status(
        run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_SUSPENDED
    )
    assert run.status == cpb.RUN_STATUS_COMPLETED, (run.status, run.pending_calls)
    results = {
        e.item.tool_result.call_id: e.item.tool_result.content
        for e in await mesh.entries(run.session_id)
        if e.item.HasField("tool_result")
    }
    assert "rolled back 0" in results[first] and "rolled back 1" in results[second]
    assert lines_of(workspace, 0) == "ran\n" and lines_of(workspace, 1) == "ran\n"


async def test_one_call_answered_twice_at_once_is_accepted_once(start_server, tmp_path, emulator):
    mesh, run_id, _workspace, (first, second) = await waiting_for_reconciliations(
        start_server, tmp_path, emulator, 2
    )
    slow_reads(mesh)
    outcomes = await answer_at_once(
        mesh,
        run_id,
        [
            pb.Reconciliation(call_id=first, action=pb.RECONCILIATION_ACTION_RUN_AGAIN),
            pb.Reconciliation(call_id=first, action=pb.RECONCILIATION_ACTION_FAIL, message="rolled back"),
        ],
    )
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(refused) == 1, outcomes
    assert refused[0].code() == grpc.StatusCode.INVALID_ARGUMENT
    run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == cpb.RUN_STATUS_SUSPENDED
    assert [p.call.call_id for p in run.pending_calls] == [second]
