"""Events across runs replicas on PostgreSQL: LISTEN/NOTIFY, no polling (issue 13, decision 0011).

Two real `agentrt serve runs` processes, A (the mesh's) and B, on one PostgreSQL database.
Runs execute on A (StartRun goes to A); their event streams are read from B, opened before
the run writes anything past its start, so every later event can only reach B through A's
NOTIFY: on PostgreSQL a runs replica's streams have no poll interval at all (a lost
notification would hang the stream, and the test would time out). B's streams must carry
every stored event of the run, in seq order, with no gap, ending with stream_end; the
session stream on B too.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from chaos_helpers import ChaosMesh, new_port
from e2e_helpers import STATE_TIMEOUT
from shared_meshes import reset_chaos

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TURNS = 5


def _turns(path: str, body) -> Reply | None:
    """Four tool turns (an echo), then the answer; streamed slowly so the run takes a while."""
    done = json.dumps(body).count("function_call_output")
    if done + 1 < TURNS:
        cmd = json.dumps({"cmd": f"echo turn-{done + 1}"})
        return Reply(text=f"turn {done + 1}", tool_calls=[ToolCallReply("exec_command", cmd)],
                     chunk_chars=3, event_delay=0.01)  # fmt: skip
    return Reply(text="all turns done", chunk_chars=3, event_delay=0.01)


@pytest.fixture
def two_replicas(shared_chaos: ChaosMesh) -> ChaosMesh:
    # The session's chaos mesh (conftest.py), reset, with a second plain replica "b".
    mesh = reset_chaos(shared_chaos, _turns, keep=("b",))
    if "b" not in mesh.replicas:
        mesh.spawn("runs", "b", new_port(), {"AGENTRT_RUNS_REPLICA_ID": "b"})
    return mesh


async def _read_all(stub: pb_grpc.RunServiceStub, req: pb.StreamRunEventsRequest) -> list[pb.RunEvent]:
    out = []
    async for msg in stub.StreamRunEvents(req, timeout=STATE_TIMEOUT):
        out.append(msg.event)
        if req.run_id and msg.event.WhichOneof("payload") == "stream_end":
            break
    return out


async def test_a_stream_on_another_replica_is_woken_by_notify(two_replicas: ChaosMesh, tmp_path):
    a, b = two_replicas.replicas["a"].address, two_replicas.replicas["b"].address
    agent = pb.AgentSpec(
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command")],
        limits=pb.AgentLimits(max_turns=TURNS + 1),
    )
    async with grpc.aio.insecure_channel(a) as ca, grpc.aio.insecure_channel(b) as cb:
        on_a, on_b = pb_grpc.RunServiceStub(ca), pb_grpc.RunServiceStub(cb)
        runs = []
        for i in range(3):
            started = await on_a.StartRun(
                pb.StartRunRequest(agent=agent, input=f"go {i}", workspace=str(tmp_path / f"w{i}"))
            )
            runs.append(started)
        streams = [
            asyncio.create_task(_read_all(on_b, pb.StreamRunEventsRequest(run_id=r.run_id))) for r in runs
        ]
        got = await asyncio.wait_for(asyncio.gather(*streams), STATE_TIMEOUT)

        for started, events in zip(runs, got, strict=True):
            run = (await on_a.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
            assert run.status == cpb.RUN_STATUS_COMPLETED, run
            assert run.turns == TURNS
            kinds = [e.WhichOneof("payload") for e in events]
            assert "gap" not in kinds, kinds
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert kinds[-1] == "stream_end"
            # complete: exactly what storage holds (replayed from A after the end)
            stored = await _read_all(on_a, pb.StreamRunEventsRequest(run_id=started.run_id))
            assert [e.SerializeToString() for e in events] == [e.SerializeToString() for e in stored]

        # the session stream on B carries the same events in session order
        session = runs[0].session_id
        stored_run = await _read_all(on_a, pb.StreamRunEventsRequest(run_id=runs[0].run_id))
        want = len(stored_run)
        session_events: list[pb.RunEvent] = []
        call = on_b.StreamRunEvents(pb.StreamRunEventsRequest(session_id=session), timeout=STATE_TIMEOUT)
        async for msg in call:
            session_events.append(msg.event)
            if len(session_events) == want:
                break
        call.cancel()
        assert [e.seq for e in session_events] == list(range(1, want + 1))
        assert [e.run_id for e in session_events] == [runs[0].run_id] * want
