"""ResumeRun racing on two runs replicas that share one PostgreSQL run store.

A run suspended for approval gets two ResumeRun calls at once: one on each replica, the
same twice on one replica, or a ResumeRun on one replica racing a CancelRun on the other.
Each race is repeated (small random delays shift who reads first). After each round:

- the run continued at most once: each model request of the run was made once (the
  provider emulator's request log), the gated command ran at most once (it appends a line),
  the session holds no entry twice;
- each caller got a clear answer: a response, or FAILED_PRECONDITION naming a reason;
- the run ended (COMPLETED, or CANCELED when the cancel won);
- the event stream, read live on both replicas and read back afterwards, has no seq twice,
  nothing missing that a gap event does not name (a takeover's unused reservation, when a
  replica's 0.6 s lease lapsed under load), and one run_resumed / run_completed.

The answers of a run waiting on two calls, split across the replicas, are in
test_runs_resume_answers_across_replicas.py.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.service.runs.resume_races import (
    LOSER_REASONS,
    ROUNDS,
    approve,
    check_answer,
    race_round,
    two_replicas,
)

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("where", ["one_on_each_replica", "both_on_one_replica"])
async def test_one_approval_answered_twice_at_once_continues_once(start_server, tmp_path, emulator, where):
    mesh, stub_b = await two_replicas(start_server, tmp_path, emulator)
    rng = random.Random(1 if where == "one_on_each_replica" else 2)
    for i in range(ROUNDS):
        if where == "one_on_each_replica":
            stubs = [mesh.runs, stub_b]
        else:
            stubs = [mesh.runs if i % 2 else stub_b] * 2
        outcomes, final = await race_round(
            mesh,
            [mesh.runs, stub_b],
            rng,
            i,
            lambda s, r: [approve(stub, s.run_id, r.pending_calls[0].call.call_id) for stub in stubs],  # noqa: B023
        )
        answers = sorted(check_answer(o) for o in outcomes)
        assert answers[0] in LOSER_REASONS and answers[1] == "ok", (i, answers)
        assert final.status == cpb.RUN_STATUS_COMPLETED, (i, final.failure)


async def test_an_approval_racing_a_cancel_on_the_other_replica_ends_the_run_once(
    start_server, tmp_path, emulator
):
    mesh, stub_b = await two_replicas(start_server, tmp_path, emulator)
    rng = random.Random(3)
    seen: dict[tuple[str, str, int], int] = {}
    for i in range(ROUNDS):
        resumer, canceler = (mesh.runs, stub_b) if i % 2 else (stub_b, mesh.runs)

        def calls(s: pb.StartRunResponse, r: pb.Run) -> list[Callable[[], Awaitable[Any]]]:
            cancel = pb.CancelRunRequest(run_id=s.run_id, reason="race")
            return [
                approve(resumer, s.run_id, r.pending_calls[0].call.call_id),  # noqa: B023
                lambda: canceler.CancelRun(cancel),  # noqa: B023
            ]

        outcomes, final = await race_round(mesh, [mesh.runs, stub_b], rng, i, calls)
        resumed, canceled = (check_answer(o) for o in outcomes)
        assert "ok" in (resumed, canceled), (i, resumed, canceled)
        assert final.status in (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_CANCELED), (i, final)
        if resumed != "ok":
            assert final.status == cpb.RUN_STATUS_CANCELED, (i, final)
        key = (resumed, canceled, final.status)
        seen[key] = seen.get(key, 0) + 1
        with mesh.emu._lock:  # a canceled run leaves its scripted replies unasked
            mesh.emu._script.clear()
    print("outcomes (resume, cancel, final status):", seen)
