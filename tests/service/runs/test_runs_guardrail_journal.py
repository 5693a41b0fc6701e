"""A model guardrail's judge call is keyed, so a takeover never asks the judge twice (decision 0019).

Replica a loses its lease while a judge call is in flight (as a replica starved of CPU does)
and dies; replica b takes the run over and consults the same guardrail for the same decision
with the same key: the gateway's journal answers it (the flight a's call left running, or
its recorded answer), and the emulator sees the judge's request once.
"""

from __future__ import annotations

import threading

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.guards import OUT, is_judge, judge, judge_calls, model_calls, nested_of, verdict
from tests.service.runs.harness import WAIT_S, agent, start_mesh, start_replica
from tests.service.runs.test_runs_takeover import crash, until

ENDED = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)


async def test_a_takeover_mid_judge_is_answered_from_the_journal_not_asked_again(
    start_server, tmp_path, emulator
):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    release = threading.Event()

    def respond(path, body):
        if not is_judge(path, body):
            return None  # the agent's own call: from the script
        release.wait(WAIT_S)  # the judge answers only once replica a is gone
        return verdict("allow")

    emulator.responder = respond
    emulator.script([Reply(text="the answer")])
    spec = agent(guardrails=[judge("out_check", [OUT])])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))

    async def judging() -> bool:
        return len(judge_calls(mesh)) == 1

    await until(judging, "replica a's judge call to reach the provider")
    manager = mesh.runs_server.manager
    for executor, _ in list(manager._executors.values()):
        executor.stop("lease_lost")  # what a missed renewal does: the call is left to the next owner
    crash(mesh.runs_server)
    replica_b, stub = await start_replica(mesh, start_server)

    async def b_owns() -> bool:
        return started.run_id in replica_b.manager._executors or await ended()

    async def ended() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status in ENDED

    await until(b_owns, "replica b to take the run over")
    release.set()
    await until(ended, "replica b to finish the run")
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "the answer", run.failure
    assert len(judge_calls(mesh)) == 1  # b's ask was answered by the journal, not the provider
    assert len(model_calls(mesh)) == 1
    assert nested_of(run) == (7, 3, 1)  # the journaled answer's usage, counted once
    log = await replica_b.manager.store.read_log(started.run_id)
    assert [p["key"] for _, kind, p in log if kind == "guardrail_results"] == ["output:1::"]
