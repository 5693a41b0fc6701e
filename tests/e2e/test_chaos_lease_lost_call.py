"""A runs replica that loses its lease mid model call hands the call over (issue 13, PostgreSQL).

The path the scale-out's runs-kill phase hit (one turn-1 request reached the provider twice):
a replica starved past its lease (there: CPU, here: SIGSTOP at a named point, its first
model delta) is taken over; the new owner re-sends the turn's keyed call to another gateway
replica, which waits on the journal row the first gateway holds. When the first replica
wakes, its renewal finds the lease lost and stops the run, which cancelled the model call
and sent CancelGenerate: the first gateway stopped the provider call and released the
key, and the second gateway, finding the key free, asked the provider again. A replica
that lost its lease (or drains) must leave the call to the next owner: the provider is
asked once, the new owner gets the answer from the journal, and the run completes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from chaos_helpers import ChaosMesh, Follower, new_port
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.mesh.storage.db import Database
from agentrt.v1 import common_pb2 as cpb
from tests.emulators.providers import Reply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CELL = "cell:leaselost"
#: The answer's length, streamed 2 characters per event 0.05 s apart: about 10 s, so the
#: provider call outlasts the stop, the takeover and the wake-up.
ANSWER = "a" * 400


def _slow_answer(path: str, body: object) -> Reply | None:
    if CELL not in json.dumps(body):
        return None
    return Reply(text=ANSWER, chunk_chars=2, event_delay=0.05)


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    return reset_chaos(shared_chaos, _slow_answer)  # the session's chaos mesh (conftest.py), reset


async def _owner(url: str, run_id: str) -> str:
    from sqlalchemy import text

    db = Database(url)
    try:
        async with db.read() as conn:
            owner = await conn.scalar(text("SELECT lease_owner FROM runs WHERE run_id = :r"), {"r": run_id})
            return owner or ""
    finally:
        await db.close()


async def test_a_replica_that_lost_its_lease_mid_call_leaves_the_call_to_the_next_owner(chaos):
    import grpc

    from agentrt.v1 import run_service_pb2 as pb
    from agentrt.v1 import run_service_pb2_grpc as pb_grpc

    # Only s1 and s2 execute runs: the mesh's own replica would take the run over through
    # s1's gateway instead of s2's.
    chaos.kill(chaos.replicas.pop("a"))
    g2 = f"127.0.0.1:{new_port()}"
    chaos.spawn("gateway", "gateway-2", int(g2.rsplit(":", 1)[1]))
    lease = {"AGENTRT_RUNS_LEASE_SECONDS": "3"}
    s1 = chaos.spawn("runs", "s1", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "s1", **lease})
    s2 = chaos.spawn(
        "runs", "s2", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "s2", "AGENTRT_GATEWAY_ADDR": g2, **lease}
    )
    runs_db = chaos.env["AGENTRT_RUNS_DB"]
    try:
        agent = pb.AgentSpec(model=cpb.ModelRef(provider="openai", model="gpt-test"))
        async with grpc.aio.insecure_channel(s1.address) as channel:
            started = await pb_grpc.RunServiceStub(channel).StartRun(
                pb.StartRunRequest(agent=agent, input=f"do {CELL}")
            )
        follower = Follower(started.run_id)
        await follower.follow(s1.address, until="model_delta")  # the named point: mid model call
        os.kill(s1.pid, signal.SIGSTOP)
        try:

            async def taken_over() -> None:
                while await _owner(runs_db, started.run_id) != "s2":
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(taken_over(), STATE_TIMEOUT)
        finally:
            os.kill(s1.pid, signal.SIGCONT)  # s1 renews, finds its lease lost, stops the run
        await follower.to_the_end([s2.address])
        async with grpc.aio.insecure_channel(s2.address) as channel:
            run = (await pb_grpc.RunServiceStub(channel).GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        assert run.final_output == ANSWER
        asked = [b for _, b in chaos.emu.requests if CELL in json.dumps(b)]
        assert len(asked) == 1, f"the provider was asked {len(asked)} times"
    finally:
        for replica in (s1, s2):
            chaos.replicas.pop(replica.name, None)
            if replica.proc is not None and replica.proc.poll() is None:
                replica.proc.terminate()
                replica.proc.wait(30)
