"""`agentrt.client.AgentrtClient` against the real mesh: the surface the TypeScript client has.

The mesh (started by `start_mesh`, the provider emulator as the model) requires a bearer token
on every call, so each passing call shows the token travelled; tenants are told apart by
metadata. The same four scenarios as clients/typescript/test/mesh.test.ts: a run with a tool
call streamed to completion and its session read back, an approval answered, a stream cut
mid-run resumed from the last seq, refused requests surfacing their reasons.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from e2e_helpers import MESH_TOKEN, STATE_TIMEOUT, CuttableProxy

from agentrt.client import AgentrtClient, AgentrtError, Reconnect
from agentrt.client.events import RECONNECT_CODES
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import error_reason_pb2 as epb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply

pytestmark = pytest.mark.slow


def _client(mesh, tenant: str, runs: str = "") -> AgentrtClient:
    return AgentrtClient(runs or mesh.runs, sessions=mesh.sessions, token=MESH_TOKEN, tenant=tenant)


def _request(tmp_path, name: str, needs_approval: bool) -> pb.StartRunRequest:
    agent = pb.AgentSpec(
        name="py-agent",
        instructions="Use exec_command, then answer.",
        model=cpb.ModelRef(provider="openai", model="gpt-test"),
        tools=[pb.AgentTool(name="exec_command", needs_approval=needs_approval)],
        limits=pb.AgentLimits(max_turns=4),
    )
    return pb.StartRunRequest(agent=agent, input=f"write {name}", workspace=str(tmp_path / name))


def _write(file: str) -> Reply:
    return Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": f"printf py > {file}"}))])


async def _drain(client: AgentrtClient, run_id: str, **kw) -> list[pb.RunEvent]:
    async def collect() -> list[pb.RunEvent]:
        return [event async for event in client.events(run_id, **kw)]

    return await asyncio.wait_for(collect(), STATE_TIMEOUT)


def _kinds(events: list[pb.RunEvent]) -> list[str]:
    return [e.WhichOneof("payload") for e in events]


async def test_a_run_with_a_tool_call_streams_to_completion_and_its_session_reads_back(token_mesh, tmp_path):
    token_mesh.emu.script([_write("one.txt"), Reply(text="one.txt is written")])
    async with _client(token_mesh, "py-acme") as client:
        started = await client.start_run(_request(tmp_path, "one", False))
        events = await _drain(client, started.run_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        kinds = _kinds(events)
        assert kinds[0] == "run_started" and kinds[-2:] == ["run_completed", "stream_end"]
        returned = [e.tool_returned.result for e in events if e.HasField("tool_returned")]
        assert [r.status for r in returned] == [cpb.TOOL_RESULT_STATUS_OK]
        assert (tmp_path / "one" / "one.txt").read_text() == "py"
        run = await client.get_run(started.run_id)
        assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "one.txt is written"
        session = await client.get_session(started.session_id)
        entries = await client.list_entries(started.session_id)
        calls = [e.item.tool_call for e in entries if e.item.HasField("tool_call")]
        results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
        assert [c.name for c in calls] == ["exec_command"]
        assert [r.call_id for r in results] == [calls[0].call_id]
        assert session.last_seq == entries[-1].seq
        context = await client.get_context(started.session_id)
        assert [e.seq for e in context] == [e.seq for e in entries if e.kind == "item"]

        # a cursor from an earlier life of the timeline: the gap is surfaced, then all of it
        replayed = await _drain(client, started.run_id, after_seq=10_000)
        assert replayed[0].HasField("gap") and replayed[0].gap.last_good == 0
        assert replayed[0].gap.dropped == 10_000
        assert [e.seq for e in replayed[1:]] == [e.seq for e in events]


async def test_an_approval_is_answered_and_the_run_goes_on(token_mesh, tmp_path):
    token_mesh.emu.script([_write("two.txt"), Reply(text="approved and written")])
    async with _client(token_mesh, "py-acme") as client:
        started = await client.start_run(_request(tmp_path, "two", True))
        events: list[pb.RunEvent] = []
        async for event in client.events(started.run_id):
            events.append(event)
            if event.HasField("run_suspended"):
                pending = event.run_suspended.pending_calls[0]
                assert pending.kind == pb.PENDING_CALL_KIND_APPROVAL
                assert not (tmp_path / "two" / "two.txt").exists()
                assert (await client.get_run(started.run_id)).status == cpb.RUN_STATUS_SUSPENDED
                await client.approve(started.run_id, pending.call.call_id)
        kinds = _kinds(events)
        assert kinds.index("run_suspended") < kinds.index("run_resumed") < kinds.index("tool_returned")
        assert (tmp_path / "two" / "two.txt").read_text() == "py"
        assert (await client.get_run(started.run_id)).final_output == "approved and written"


async def test_a_stream_cut_mid_run_resumes_from_the_last_seq(token_mesh, tmp_path):
    token_mesh.emu.script([_write("three.txt"), Reply(text="survived the cut")])
    proxy = CuttableProxy(token_mesh.runs)
    address = await proxy.start()
    reconnects: list[Reconnect] = []
    try:
        async with (
            _client(token_mesh, "py-acme", address) as client,
            _client(token_mesh, "py-acme") as direct,
        ):
            started = await client.start_run(_request(tmp_path, "three", True))
            events: list[pb.RunEvent] = []
            async for event in client.events(started.run_id, on_reconnect=reconnects.append):
                events.append(event)
                if event.HasField("run_suspended"):
                    proxy.cut()  # the open StreamRunEvents call breaks here
                    await direct.approve(started.run_id, event.run_suspended.pending_calls[0].call.call_id)
            assert (await client.get_run(started.run_id)).final_output == "survived the cut"
    finally:
        await proxy.close()
    suspended = next(e.seq for e in events if e.HasField("run_suspended"))
    assert reconnects and reconnects[0].after_seq == suspended
    assert reconnects[0].error is not None and reconnects[0].error.code in RECONNECT_CODES
    assert proxy.connections >= 2
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # nothing lost, nothing repeated
    assert "gap" not in _kinds(events) and _kinds(events)[-1] == "stream_end"


async def test_refused_requests_surface_their_status_and_reason(token_mesh, tmp_path):
    async with _client(token_mesh, "py-acme") as client, _client(token_mesh, "py-globex") as other:
        bad = _request(tmp_path, "four", False)
        bad.agent.name = "not a valid name!"
        with pytest.raises(AgentrtError) as invalid:
            await client.start_run(bad)
        assert invalid.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert invalid.value.reason == epb.INVALID_AGENT and invalid.value.reason_name == "INVALID_AGENT"
        assert invalid.value.metadata["field"] == "agent.name"

        token_mesh.emu.script([Reply(text="mine")])
        started = await client.start_run(_request(tmp_path, "five", False))
        await _drain(client, started.run_id)
        with pytest.raises(AgentrtError) as hidden:
            await other.get_run(started.run_id)
        assert hidden.value.code == grpc.StatusCode.NOT_FOUND and hidden.value.reason == epb.RUN_NOT_FOUND
        with pytest.raises(AgentrtError) as hidden_stream:
            await _drain(other, started.run_id)
        assert hidden_stream.value.reason == epb.RUN_NOT_FOUND
        with pytest.raises(AgentrtError) as hidden_session:
            await other.get_session(started.session_id)
        assert hidden_session.value.reason == epb.SESSION_NOT_FOUND
        with pytest.raises(AgentrtError) as late:
            await client.approve(started.run_id, "call-1")
        assert late.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert late.value.reason in (epb.RUN_NOT_SUSPENDED, epb.RUN_FINISHED)

    async with AgentrtClient(token_mesh.runs) as anonymous:
        with pytest.raises(AgentrtError) as denied:
            await anonymous.get_run(started.run_id)
        assert denied.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert denied.value.reason == epb.UNAUTHENTICATED
