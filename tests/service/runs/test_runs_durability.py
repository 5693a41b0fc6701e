"""Nothing is shown before it is durable; nothing is billed twice; seqs are never reused (issue 9).

- A durable event (model_responded, tool_called, items_persisted, ...) reaches a subscriber
  only once the save point that records it has committed.
- A replica dying right after a client saw `model_responded` leaves the response in the
  run log: the replica that takes over does not request it again, and the seqs the client
  saw keep their content; what was delivered and never written is an explicit gap.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from agentrt.mesh.config import ServerConfig
from agentrt.runs.config import RunsConfig
from agentrt.runs.events.hub import Subscription, session_topic
from agentrt.runs.server import build_server as build_runs
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from agentrt.v1 import session_service_pb2 as spb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import WAIT_S, agent, start_mesh
from tests.service.runs.test_runs_takeover import crash, until


async def test_a_durable_event_is_delivered_only_after_its_write(mesh):
    """model_responded of a tool turn waits for the transaction that logs it."""
    manager = mesh.runs_server.manager
    store = manager.store
    original = store.save
    gate, blocked = asyncio.Event(), asyncio.Event()

    async def slow_save(run_id, *, log=(), **kw):
        log = list(log)
        if any(kind == "tools_started" for kind, _ in log):
            blocked.set()
            await gate.wait()  # the save that records the response is in flight
        return await original(run_id, log=log, **kw)

    store.save = slow_save  # type: ignore[method-assign]
    session = (await mesh.sessions.CreateSession(spb.CreateSessionRequest())).session
    sub = manager.deps.hub.subscribe(session_topic("default", session.session_id))
    mesh.emu.script([Reply(text="calling", tool_calls=[ToolCallReply("list_files", "{}")]), Reply(text="ok")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", session_id=session.session_id)
    )
    await asyncio.wait_for(blocked.wait(), WAIT_S)
    delivered = []
    while (item := await sub.next(0)) is not None:
        delivered.append(item[1].WhichOneof("payload"))
    assert "turn_started" in delivered and "model_delta" in delivered  # provisional: live
    assert "model_responded" not in delivered and "tool_called" not in delivered
    logged = [kind for _, kind, _ in await store.read_log(started.run_id)]
    assert "model_responded" not in logged
    gate.set()
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
    assert run.final_output == "ok"
    events = await mesh.events(started.run_id)
    by_kind = {e.WhichOneof("payload"): e for e in events}
    assert not by_kind["model_responded"].provisional and by_kind["model_delta"].provisional
    manager.deps.hub.unsubscribe(sub)


def _replica(mesh, name: str) -> object:
    return build_runs(
        RunsConfig(
            server=ServerConfig(port=0, db_url=mesh.runs_server.config.db_url, state_dir=mesh.tmp),
            gateway_address=mesh.addresses["gateway"],
            tools_address=mesh.addresses["tools"],
            sessions_address=mesh.addresses["sessions"],
            tasks_address="",
            lease_seconds=0.6,
            replica_id=name,
        )
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_takeover_after_model_responded_is_seen_requests_nothing_twice(
    start_server, tmp_path, emulator, provider
):
    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    emulator.script(
        [
            Reply(text="step one", tool_calls=[ToolCallReply("list_files", "{}")]),
            Reply(text="step two", tool_calls=[ToolCallReply("exec_command", '{"cmd": "echo two"}')]),
            Reply(text="all done"),
        ]
    )
    hub = mesh.runs_server.manager.deps.hub
    session = (await mesh.sessions.CreateSession(spb.CreateSessionRequest())).session

    class DieOnDelivery(Subscription):
        """Kills replica a in the very call that delivers turn 2's model_responded."""

        def offer(self, seq: int, event: pb.RunEvent) -> None:
            super().offer(seq, event)
            if event.WhichOneof("payload") == "model_responded" and event.turn == 2:
                crash(mesh.runs_server)

    topic = session_topic("default", session.session_id)
    hub._subs.setdefault(topic, set()).add(DieOnDelivery(topic, 1024))
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(provider), input="go", session_id=session.session_id)
    )
    seen: dict[int, bytes] = {}

    async def until_second_response() -> None:
        call = mesh.runs.StreamRunEvents(pb.StreamRunEventsRequest(run_id=started.run_id))
        async for msg in call:
            seen[msg.event.seq] = msg.event.SerializeToString()
            if msg.event.WhichOneof("payload") == "model_responded" and msg.event.turn == 2:
                call.cancel()
                return

    await asyncio.wait_for(until_second_response(), WAIT_S)
    last_seen = max(seen)
    replica_b = _replica(mesh, "replica-b")
    address = await start_server(replica_b)
    stub = pb_grpc.RunServiceStub(grpc.aio.insecure_channel(address))

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    # each model request went to the provider exactly once (turn 2's is in the log)
    assert len(emulator.requests) == 3
    bodies = [json.dumps(b, sort_keys=True) for _, b in emulator.requests]
    assert len(set(bodies)) == 3
    # the client reconnects from its last seq: everything after it, or an explicit gap
    after = []
    async for msg in stub.StreamRunEvents(
        pb.StreamRunEventsRequest(run_id=started.run_id, after_seq=last_seen)
    ):
        after.append(msg.event)
    assert after[-1].WhichOneof("payload") == "stream_end"
    assert all(e.seq > last_seen for e in after if e.WhichOneof("payload") != "gap")
    # a full replay gives every seq the client saw its same content
    replay = {}
    async for msg in stub.StreamRunEvents(pb.StreamRunEventsRequest(run_id=started.run_id)):
        if msg.event.WhichOneof("payload") != "gap":
            replay[msg.event.seq] = msg.event.SerializeToString()
    for seq, raw in seen.items():
        # a seq the client saw is never given to a different event (it may be in a gap)
        assert seq not in replay or replay[seq] == raw, f"seq {seq} now holds another event"
    responded = [pb.RunEvent.FromString(raw) for raw in seen.values()]
    assert any(e.WhichOneof("payload") == "model_responded" and e.turn == 2 for e in responded)
    run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert run.final_output == "all done" and run.turns == 3


async def test_unknown_run_and_stale_cursor_get_an_explicit_answer(mesh):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.events("run_01jzzzzzzzzzzzzzzzzzzzzzzz")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "sleep 1"}')]), Reply(text="x")]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    # a live run and a cursor far ahead of it: the reset is answered at once, not after the run
    first = await mesh.events(started.run_id, after_seq=50_000, limit=1)
    assert first[0].WhichOneof("payload") == "gap" and first[0].gap.last_good == 0
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED)
