"""Defects found by a second breaker attacking a live mesh (bad input: a clear status, nothing changed).

Each failed before its fix.
"""

from __future__ import annotations

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.harness import agent


async def test_an_idempotency_key_with_control_characters_is_refused(store_mesh):
    mesh = store_mesh
    mesh.emu.script([Reply(text="a"), Reply(text="b")])
    first = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="first"))
    await mesh.wait_status(first.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    for key in ("a\x00b", "a\nb"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="second", idempotency_key=key))
        refused = (info.value.code(), reason_of(info.value))
        assert refused == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
        assert "idempotency_key" in info.value.details()
    # nothing was recorded, and the server keeps serving
    runs = (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs
    assert [r.run_id for r in runs] == [first.run_id]


@pytest.fixture
async def pg_mesh(start_server, tmp_path, emulator):
    from tests.service.runs.harness import start_mesh

    return await start_mesh(start_server, tmp_path, emulator, pg=True)


NUL_TEXT = "before\x00after"


@pytest.mark.postgres
async def test_a_model_answer_with_a_nul_character_completes_on_postgres(pg_mesh):
    mesh = pg_mesh
    mesh.emu.script([Reply(text=NUL_TEXT)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="say it"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, (run.failure.kind, run.failure.debug_message)
    assert run.final_output.replace("\x00", "").replace("\ufffd", "") == "beforeafter"


@pytest.mark.postgres
async def test_a_start_input_with_a_nul_character_is_not_an_internal_error_on_postgres(pg_mesh):
    mesh = pg_mesh
    mesh.emu.script([Reply(text="ok")])
    try:
        started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input=NUL_TEXT))
    except grpc.aio.AioRpcError as exc:
        refused = (exc.code(), reason_of(exc))
        assert refused == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"), exc.details()
        assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []  # nothing changed
    else:
        run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
        assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_stopping_at_a_handoff_keeps_control_with_the_agent(mesh, provider):
    import asyncio

    from tests.emulators.providers import ToolCallReply
    from tests.service.runs.harness import WAIT_S

    billing = agent(provider, name="billing", tools=[], instructions="BILLING")
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=billing))
    triage = agent(provider, name="triage", tools=[], instructions="TRIAGE", handoffs=["billing"])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=triage))
    handoff = ToolCallReply("transfer_to_billing", "{}")
    # the handoff's answer is slow (reply_delay; event_delay between streamed events), so the
    # stop is asked for while the triage turn is in flight
    slow = Reply(text="routing", tool_calls=[handoff], reply_delay=3.0, event_delay=0.4)
    mesh.emu.script([slow, Reply(text="billing")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="triage", input="go"))

    async def asked() -> None:
        while not mesh.emu.requests:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(asked(), WAIT_S)
    stop = await mesh.runs.StopAfterTurn(pb.StopAfterTurnRequest(run_id=started.run_id, reason="enough"))
    assert stop.run.status == cpb.RUN_STATUS_RUNNING and stop.run.turns == 0  # asked mid-turn
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "routing"
    assert len(mesh.emu.requests) == 1  # the target was never asked
    assert run.current_agent_name in ("", "triage"), run.current_agent_name
