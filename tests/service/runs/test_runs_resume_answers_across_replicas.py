"""Answers to one suspended run's calls arriving at once on two runs replicas (PostgreSQL).

ResumeRun reads the run, merges its answers into the answers it read, and writes them back
(runs/lifecycle/control.py `_resume`). On one replica requests answering one run are taken
one at a time (`RunControl.resume`'s per-run asyncio.Lock; test_runs_reconcile_race.py).
Across replicas the write was guarded by the run's status only, so the later write dropped
what the earlier one wrote while both callers were told their answer was taken; each write
is now guarded by the run's last save as read (decision 0061), and a write that finds the
run written meanwhile reads and merges again.

- Two calls, one answered on each replica: both answers count and the run goes on (before
  the fix: in about 4 rounds of 10 one answer was lost and the run waited on a call whose
  caller got a response).
- A denial accepted on replica A (another call still waits) is not overturned by replica B's
  request answering both calls: B's is refused INVALID_VALUE (before the fix: in about 2
  rounds of 10 the command A's caller was told is denied ran).

Each race is repeated ROUNDS times with small random delays.
"""

from __future__ import annotations

import asyncio
import os
import random

import grpc
import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.service.runs.resume_races import (
    DONE,
    ROUNDS,
    after,
    check_answer,
    check_round,
    suspended_run,
    two_replicas,
)

pytestmark = pytest.mark.postgres


def answer_one(stub: pb_grpc.RunServiceStub, run_id: str, call_id: str, approved: bool):
    request = pb.ResumeRunRequest(
        run_id=run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=approved)]
    )
    return lambda: stub.ResumeRun(request)


async def test_two_calls_answered_one_on_each_replica_at_once_both_count(start_server, tmp_path, emulator):
    """Each replica answers one of the two waiting calls: both answers count and the run goes on.

    Both callers are told their answer was taken (a response), so neither answer may be lost:
    on one replica the two requests are taken one at a time (test_runs_reconcile_race.py);
    across replicas each reads the run, merges its answer into what it read and writes
    pending_calls/answers back under the status guard only, so the later write drops the
    earlier answer and the run waits on a call its caller was told was answered.
    """
    mesh, stub_b = await two_replicas(start_server, tmp_path, emulator)
    rng = random.Random(4)
    lost = []
    for i in range(ROUNDS):
        workspace = os.path.join(mesh.work, f"split-{i}")
        since = len(mesh.emu.requests)
        started, run = await suspended_run(mesh, workspace, calls=2)
        first, second = (p.call.call_id for p in run.pending_calls)
        outcomes = await asyncio.gather(
            after(rng.uniform(0, 0.01), answer_one(mesh.runs, started.run_id, first, True)),
            after(rng.uniform(0, 0.01), answer_one(stub_b, started.run_id, second, True)),
            return_exceptions=True,
        )
        answers = [check_answer(o) for o in outcomes]
        if answers != ["ok", "ok"]:
            continue  # one was refused with a reason: clear to its caller, nothing lost
        run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
        if run.status == cpb.RUN_STATUS_SUSPENDED:
            await asyncio.sleep(0.3)
            run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
        if run.status == cpb.RUN_STATUS_SUSPENDED:
            lost.append((i, [p.call.call_id for p in run.pending_calls]))
            await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="answer lost"))
            with mesh.emu._lock:
                mesh.emu._script.clear()
            continue
        await check_round(mesh, started, workspace, since, [], calls=2)
    assert not lost, (
        f"{len(lost)}/{ROUNDS} rounds: both answers accepted, one lost, the run still waits: {lost}"
    )


async def test_a_denial_accepted_on_one_replica_is_not_overturned_by_the_other(
    start_server, tmp_path, emulator
):
    """Replica A denies call 1 (call 2 still waits); replica B answers both calls, approving call 1.

    On one replica the later request is refused (the call left pending_calls: INVALID_VALUE).
    Across replicas, when both are accepted, the command A's caller was told is denied must
    not run.
    """
    mesh, stub_b = await two_replicas(start_server, tmp_path, emulator)
    rng = random.Random(5)
    overturned = []
    for i in range(ROUNDS):
        workspace = os.path.join(mesh.work, f"deny-{i}")
        started, run = await suspended_run(mesh, workspace, calls=2)
        first, second = (p.call.call_id for p in run.pending_calls)
        both = pb.ResumeRunRequest(
            run_id=started.run_id,
            decisions=[
                pb.ApprovalDecision(call_id=first, approved=True),
                pb.ApprovalDecision(call_id=second, approved=True),
            ],
        )
        outcomes = await asyncio.gather(
            after(rng.uniform(0, 0.01), answer_one(mesh.runs, started.run_id, first, False)),
            after(rng.uniform(0, 0.01), lambda: stub_b.ResumeRun(both)),  # noqa: B023
            return_exceptions=True,
        )
        denied_ok = not isinstance(outcomes[0], BaseException)
        both_ok = not isinstance(outcomes[1], BaseException)
        for o in outcomes:
            if isinstance(o, BaseException):
                assert isinstance(o, grpc.aio.AioRpcError), repr(o)
                assert o.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT)
        final = await mesh.wait_status(started.run_id, *DONE, cpb.RUN_STATUS_SUSPENDED)
        if final.status == cpb.RUN_STATUS_SUSPENDED:
            await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=started.run_id, reason="cleanup"))
        final = await mesh.wait_status(started.run_id, *DONE)
        ran = os.path.exists(os.path.join(workspace, "l0.txt"))
        if denied_ok and both_ok and ran:
            overturned.append(i)
        with mesh.emu._lock:
            mesh.emu._script.clear()
    assert not overturned, (
        f"{len(overturned)}/{ROUNDS} rounds: the denial was accepted on A, the approval on B, "
        f"and the denied command ran: {overturned}"
    )
