"""Three calls answered on two replicas at once, StopAfterTurn and CancelRun racing (decision 0061)."""

from __future__ import annotations

import asyncio
import os
import random

import grpc
import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.service.runs.resume_races import DONE, after, suspended_run, two_replicas

pytestmark = pytest.mark.postgres
ROUNDS = 12


def _resume(stub, run_id, call_id, approved):
    req = pb.ResumeRunRequest(
        run_id=run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=approved)]
    )
    return lambda: stub.ResumeRun(req)


@pytest.mark.parametrize("extra", ["stop", "cancel"])
async def test_three_answers_split_over_replicas_with_a_stop_or_cancel(
    start_server, tmp_path, emulator, extra
):
    mesh, stub_b = await two_replicas(start_server, tmp_path, emulator)
    rng, problems = random.Random(21), []
    for i in range(ROUNDS):
        started, run = await suspended_run(mesh, workspace := os.path.join(mesh.work, f"r{i}"), calls=3)
        ids = [p.call.call_id for p in run.pending_calls]
        approved = [True, False, True]
        stubs = [mesh.runs, stub_b, stub_b]
        calls = [
            after(rng.uniform(0, 0.01), _resume(stubs[n], started.run_id, ids[n], approved[n]))
            for n in range(3)
        ]
        if extra == "stop":
            req = pb.StopAfterTurnRequest(run_id=started.run_id, reason="enough")
            calls.append(after(rng.uniform(0, 0.01), lambda: stub_b.StopAfterTurn(req)))  # noqa: B023
        else:
            req = pb.CancelRunRequest(run_id=started.run_id, reason="bye")
            calls.append(after(rng.uniform(0, 0.01), lambda: mesh.runs.CancelRun(req)))  # noqa: B023
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        for o in outcomes:
            if isinstance(o, BaseException) and not (
                isinstance(o, grpc.aio.AioRpcError)
                and o.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED)
            ):
                problems.append((i, "unexpected", repr(o)[:200]))
        ok = [not isinstance(o, BaseException) for o in outcomes[:3]]
        final = await mesh.wait_status(started.run_id, *DONE, cpb.RUN_STATUS_SUSPENDED)
        if final.status == cpb.RUN_STATUS_SUSPENDED:
            await asyncio.sleep(0.5)
            final = await mesh.wait_status(started.run_id, *DONE, cpb.RUN_STATUS_SUSPENDED)
        if final.status == cpb.RUN_STATUS_SUSPENDED:
            left = [p.call.call_id for p in final.pending_calls]
            if any(ok[n] and ids[n] in left for n in range(3)):
                problems.append((i, "an answer told ok still pending", ok, left))
            if all(ok):
                problems.append((i, "all three answers ok, run still suspended", left))
            await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="cleanup"))
            final = await mesh.wait_status(started.run_id, *DONE)
        for n in range(3):
            path = os.path.join(workspace, f"l{n}.txt")
            ran = open(path).read() if os.path.exists(path) else ""
            if ran not in ("", f"{n}\n"):
                problems.append((i, f"call {n} ran twice", ran))
            if n == 1 and ran and ok[1]:
                problems.append((i, "the denial told ok was overturned"))
        if (
            extra == "cancel"
            and isinstance(outcomes[3], BaseException) is False
            and final.status == cpb.RUN_STATUS_COMPLETED
        ):
            problems.append((i, "CancelRun answered ok but the run completed"))
        with mesh.emu._lock:
            mesh.emu._script.clear()
    assert not problems, problems
