"""A limiter store that answers late makes a run wait, not fail (issue 13, on PostgreSQL).

The gateway's limiter is on PostgreSQL (a replica started with AGENTRT_LIMITER_BACKEND=
postgres in place of the mesh's) and a transaction of the test holds the limiter's budget
table locked, as a row lock queue under load would: every reservation attempt times out.
The gateway waits out its admission wait, then refuses the keyed call UNAVAILABLE/
DEPENDENCY_UNAVAILABLE (nothing asked); the run loop re-sends it with its key, bounded by
AGENTRT_RUNS_PEER_UNAVAILABLE_SECONDS, recording a `model_retry` diagnostic. Once the lock
is released the run completes, and the provider was asked exactly once.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from chaos_helpers import ChaosMesh, Replica, new_port
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.mesh.storage.db import Database
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _answer(path: str, body: object) -> Reply | None:
    return Reply(text="answered") if "cell:slowstore" in json.dumps(body) else None


@pytest.fixture
def chaos(shared_chaos: ChaosMesh) -> ChaosMesh:
    return reset_chaos(shared_chaos, _answer)  # the session's chaos mesh (conftest.py), reset


async def _logged(path, text: str) -> None:  # type: ignore[no-untyped-def]
    async def poll() -> None:
        while not (path.exists() and text in path.read_text(errors="replace")):
            await asyncio.sleep(0.1)

    try:
        await asyncio.wait_for(poll(), STATE_TIMEOUT * 2)
    except TimeoutError as exc:
        raise AssertionError(f"{path.name} never logged {text!r}") from exc


async def test_a_limiter_store_that_answers_late_makes_the_run_wait_not_fail(chaos):
    gateway = chaos.mesh.addresses["gateway"]
    chaos.kill(Replica("gateway", gateway, None, chaos.gateway_pid))
    store = chaos.env["AGENTRT_GATEWAY_DB"]
    limited = {
        "AGENTRT_LIMITER_BACKEND": "postgres",
        "AGENTRT_LIMITER_URL": store,
        "AGENTRT_LIMITER_STORE_TIMEOUT_SECONDS": "2",
        "AGENTRT_GATEWAY_MAX_QUEUE_WAIT_SECONDS": "5",  # the admission wait the store misses
    }
    chaos.gateway_pid = chaos.spawn("gateway", "gateway-pg", int(gateway.rsplit(":", 1)[1]), limited).pid
    b = chaos.spawn("runs", "b", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "b", "AGENTRT_LOG_LEVEL": "INFO"})
    holder = Database(store)
    locked, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with holder.write() as conn:
            await conn.exec_driver_sql("LOCK TABLE gateway_limiter_budgets IN EXCLUSIVE MODE")
            locked.set()
            await release.wait()

    holding = asyncio.create_task(hold())
    try:
        await locked.wait()
        agent = pb.AgentSpec(model=cpb.ModelRef(provider="openai", model="gpt-test"))
        async with grpc.aio.insecure_channel(b.address) as channel:
            stub = pb_grpc.RunServiceStub(channel)
            started = await stub.StartRun(pb.StartRunRequest(agent=agent, input="do cell:slowstore"))
            # the gateway's admission wait ran out with the store silent, and the loop re-sent
            assert b.log is not None
            await _logged(b.log, "diagnostic model_retry")
            run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
            assert run.status == cpb.RUN_STATUS_RUNNING, run
            release.set()
            await holding

            async def ended() -> pb.Run:
                while True:
                    got = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
                    if got.status != cpb.RUN_STATUS_RUNNING:
                        return got
                    await asyncio.sleep(0.1)

            run = await asyncio.wait_for(ended(), STATE_TIMEOUT)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
        assert run.final_output == "answered"
        assert "model_retry" in [d.code for d in run.diagnostics]
        asked = [b for _, b in chaos.emu.requests if "cell:slowstore" in json.dumps(b)]
        assert len(asked) == 1, asked
    finally:
        release.set()
        await asyncio.gather(holding, return_exceptions=True)
        await holder.close()
