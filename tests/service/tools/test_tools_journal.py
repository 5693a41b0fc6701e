"""The execution journal: a call runs once per (tenant, run_id, call_id), whatever repeats it.

The journal tests run on SQLite and on PostgreSQL (marked `postgres`; isolated there by a
tenant of their own, nothing is dropped).
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from datetime import UTC, datetime

import grpc
import pytest
from tools_helpers import PG_URL, ToolsEnv, make_config, pg_reachable

from agentrt.client.channels import open_channel
from agentrt.mesh.status import reason_of
from agentrt.mesh.storage.db import Database, sqlite_url
from agentrt.tools.calls.args import CallInput
from agentrt.tools.execution.request import fingerprint
from agentrt.tools.server import build_server
from agentrt.tools.storage.store import CallKey, ToolStore
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc
from tests.needs import unavailable

APPEND = {"cmd": "echo ran >> count.txt; wc -l < count.txt"}


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)])
async def jt(request, start_server, tmp_path) -> ToolsEnv:
    db_url = ""
    tenant = "default"
    if request.param == "postgres":
        if not await pg_reachable():
            unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
        db_url, tenant = PG_URL, "t-" + uuid.uuid4().hex[:20]
    config = make_config(tmp_path, db_url=db_url)
    address = await start_server(build_server(config))
    channel = open_channel(address, tenant=tenant if tenant != "default" else "")
    yield ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws", tenant)
    await channel.close()


def _lines(tools) -> int:
    return len((tools.workspace / "count.txt").read_text().splitlines())


async def test_repeat_answers_from_the_record_and_never_runs_twice(jt):
    tools = jt
    first = await tools.run("exec_command", APPEND, run_id="run_a", call_id="call_1")
    assert not first.replayed
    assert first.result.content.strip() == "1"
    second = await tools.run("exec_command", APPEND, run_id="run_a", call_id="call_1")
    assert second.replayed
    assert second.result.content == first.result.content
    assert second.result.exit_code == first.result.exit_code
    assert _lines(tools) == 1
    # another call id, or another run, is another call
    third = await tools.run("exec_command", APPEND, run_id="run_a", call_id="call_2")
    assert not third.replayed and third.result.content.strip() == "2"
    fourth = await tools.run("exec_command", APPEND, run_id="run_b", call_id="call_1")
    assert not fourth.replayed and _lines(tools) == 3


@pytest.mark.parametrize("tool", ["read_file", "exec_command"])
@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ({"sandbox_id": "../bad"}, "INVALID_ID"),
        ({"sandbox_id": "sbx_1\n"}, "INVALID_ID"),
        ({"sandbox_id": "sbx_1", "workspace": "/nonexistent/x"}, "INVALID_VALUE"),
    ],
)
async def test_a_repeat_with_a_malformed_target_is_refused_not_replayed(jt, tool, target, reason):
    # Bad input is refused whatever is on record under its key: a finished call's repeat
    # sent with a malformed sandbox_id (or with both a sandbox and a workspace) is
    # INVALID_ARGUMENT, as the same request under a fresh key is; the record is untouched
    # and a well-formed repeat still replays it.
    tools = jt
    args = {"path": "count.txt"} if tool == "read_file" else APPEND
    first = await tools.run(tool, args, run_id="run_t", call_id="call_t")
    for call_id in ("call_t", "call_fresh"):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await tools.stub.ExecuteTool(
                _retargeted(tools.request(tool, args, run_id="run_t", call_id=call_id), target)
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(err.value) == reason
    again = await tools.run(tool, args, run_id="run_t", call_id="call_t")
    assert again.replayed and again.result == first.result


def _retargeted(request: pb.ExecuteToolRequest, target: dict[str, str]) -> pb.ExecuteToolRequest:
    request.sandbox_id = target.get("sandbox_id", "")
    request.workspace = target.get("workspace", "")
    return request


async def test_concurrent_repeats_share_one_run(jt):
    tools = jt
    args = {"cmd": "sleep 0.3; echo ran >> count.txt; echo done"}
    results = await asyncio.gather(*(tools.run("exec_command", args, call_id="same") for _ in range(4)))
    assert [r.replayed for r in results].count(False) == 1
    assert {r.result.content for r in results} == {"done\n"}
    assert _lines(tools) == 1


async def test_tenants_do_not_share_records(tools):
    await tools.run("exec_command", APPEND, call_id="c1")
    other = await tools.stub.ExecuteTool(
        tools.request("exec_command", APPEND, call_id="c1"), metadata=[("x-agentrt-tenant", "acme")]
    )
    assert not other.replayed
    got = await tools.stub.GetExecution(
        pb.GetExecutionRequest(run_id="run_1", call_id="c1"), metadata=[("x-agentrt-tenant", "other")]
    )
    assert got.state == pb.EXECUTION_STATE_ABSENT


async def test_get_execution_reads_the_record(jt):
    tools = jt
    resp = await tools.run("write_file", {"path": "a.txt", "content": "x"}, call_id="w1")
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="w1"))
    assert got.state == pb.EXECUTION_STATE_FINISHED
    assert got.result.content == resp.result.content
    assert got.result.status == common_pb2.TOOL_RESULT_STATUS_OK


async def test_read_only_calls_are_recorded_too(jt):
    tools = jt
    (tools.workspace).mkdir(parents=True, exist_ok=True)
    (tools.workspace / "f.txt").write_text("v1")
    first = await tools.run("read_file", {"path": "f.txt"}, call_id="r1")
    (tools.workspace / "f.txt").write_text("v2")
    again = await tools.run("read_file", {"path": "f.txt"}, call_id="r1")
    assert again.replayed and again.result.content == first.result.content == "v1"


async def test_a_read_only_repeat_is_answered_from_its_record_when_its_sandbox_is_gone(jt):
    """read_file runs before it looks at the journal; a repeat it cannot run still gets the record."""
    tools = jt
    await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_ro_gone"))
    await tools.run("write_file", {"path": "f.txt", "content": "v1"}, call_id="w1", sandbox_id="sbx_ro_gone")
    first = await tools.run("read_file", {"path": "f.txt"}, call_id="r1", sandbox_id="sbx_ro_gone")
    assert not first.replayed and first.result.content == "v1"
    await tools.stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id="sbx_ro_gone"))
    again = await tools.run("read_file", {"path": "f.txt"}, call_id="r1", sandbox_id="sbx_ro_gone")
    assert again.replayed and again.result.content == "v1"
    # a new read-only call in the sandbox that is gone is refused, and leaves no record
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.run("read_file", {"path": "f.txt"}, call_id="r2", sandbox_id="sbx_ro_gone")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(info.value) == "SANDBOX_NOT_FOUND"
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="r2"))
    assert got.state == pb.EXECUTION_STATE_ABSENT


async def test_a_read_only_calls_one_statement_record_reads_back_as_the_stores_own(jt):
    # The FINISHED insert runs as driver SQL (decision 0025): the row must be the one the
    # store's SQLAlchemy path reads: times as written, the outcome, cancel_requested unset.
    tools = jt
    tools.workspace.mkdir(parents=True, exist_ok=True)
    (tools.workspace / "f.txt").write_text("v1")
    before = datetime.now(UTC)
    first = await tools.run("read_file", {"path": "f.txt"}, call_id="r1")
    after = datetime.now(UTC)
    db = Database(tools.config.db_url)
    try:
        store = ToolStore(db)
        key = CallKey(tools.tenant, "run_1", "r1")
        record = await store.get(key)
        assert record is not None and record.state == "finished" and record.tool == "read_file"
        assert record.fingerprint == fingerprint(CallInput("r1", "read_file", json.dumps({"path": "f.txt"})))
        assert before <= record.heartbeat_at <= after and record.heartbeat_at.tzinfo is not None
        assert record.outcome is not None and record.outcome.content == first.result.content == "v1"
        # Not a started call: a heartbeat of it changes nothing and no cancel is pending.
        assert await store.heartbeat(key, record.owner) is False
        # A second insert under the key loses, and says so.
        assert await store.record(key, "read_file", record.fingerprint, "someone", record.outcome) is False
    finally:
        await db.close()


async def test_a_read_only_call_under_a_used_key_is_refused_and_changes_nothing(jt):
    tools = jt
    done = await tools.run("exec_command", {"cmd": "echo side-effect"}, call_id="c1")
    (tools.workspace / "f.txt").write_text("data")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.run("read_file", {"path": "f.txt"}, call_id="c1")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "CALL_ID_REUSED"
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c1"))
    assert got.state == pb.EXECUTION_STATE_FINISHED and got.result.content == done.result.content


async def test_a_read_only_call_cancelled_before_it_came_answers_not_executed(jt):
    tools = jt
    (tools.workspace).mkdir(parents=True, exist_ok=True)
    (tools.workspace / "f.txt").write_text("data")
    await tools.stub.CancelExecution(pb.CancelExecutionRequest(run_id="run_1", call_id="r_late"))
    late = await tools.run("read_file", {"path": "f.txt"}, call_id="r_late")
    assert late.replayed and late.result.status == common_pb2.TOOL_RESULT_STATUS_NOT_EXECUTED
    assert "data" not in late.result.content


async def test_reused_call_id_with_other_arguments_is_refused(jt):
    tools = jt
    await tools.run("exec_command", {"cmd": "true"}, call_id="c1")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.run("exec_command", {"cmd": "rm -rf ."}, call_id="c1")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "CALL_ID_REUSED"


async def _plant_started(tools, call_id: str, owner: str, args: dict) -> None:
    """Write a STARTED record as a process that ran the call would have (through the store)."""
    db = Database(tools.config.db_url)
    try:
        call = CallInput(call_id, "exec_command", json.dumps(args))
        assert await ToolStore(db).start(
            CallKey(tools.tenant, "run_1", call_id), "exec_command", fingerprint(call), owner
        )
    finally:
        await db.close()


async def test_orphan_of_a_dead_process_answers_interrupted(jt):
    tools = jt
    dead = f"{socket.gethostname()[:24]}:999999999:1:dead"  # this host, a pid that cannot exist
    await _plant_started(tools, "c_orphan", dead, APPEND)
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_orphan"))
    assert got.state == pb.EXECUTION_STATE_STARTED
    resp = await tools.run("exec_command", APPEND, call_id="c_orphan")
    assert resp.replayed
    assert resp.result.status == common_pb2.TOOL_RESULT_STATUS_INTERRUPTED
    assert not (tools.workspace / "count.txt").exists()  # never re-ran the side effect
    got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_orphan"))
    assert got.state == pb.EXECUTION_STATE_FINISHED
    assert got.result.status == common_pb2.TOOL_RESULT_STATUS_INTERRUPTED


async def test_call_in_flight_elsewhere_is_aborted_with_retry(jt):
    tools = jt
    await _plant_started(tools, "c_elsewhere", "another-host:1:1:live", APPEND)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.run("exec_command", APPEND, call_id="c_elsewhere")
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert reason_of(info.value) == "EXECUTION_IN_PROGRESS"
    assert not (tools.workspace / "count.txt").exists()


async def test_cancel_reaches_a_call_running_in_another_replica(jt, start_server):
    """CancelExecution on replica b kills a call replica a runs, at a's next heartbeat."""
    tools = jt
    db_url = tools.config.server.db_url or sqlite_url(str(tools.tmp), "shared_tools")
    tenant = tools.tenant if tools.tenant != "default" else ""
    stubs, channels = [], []
    for name in ("a", "b"):
        config = make_config(tools.tmp / name, db_url=db_url, heartbeat_seconds=0.2)
        channels.append(open_channel(await start_server(build_server(config)), tenant=tenant))
        stubs.append(pb_grpc.ToolServiceStub(channels[-1]))
    stub_a, stub_b = stubs
    try:
        request = tools.request("exec_command", {"cmd": "sleep 300"}, call_id="c_far", timeout=120)
        request.workspace = str(tools.tmp / "far_ws")
        call = stub_a.ExecuteTool(request)

        async def started() -> bool:
            got = await stub_b.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_far"))
            return got.state == pb.EXECUTION_STATE_STARTED

        await _until(started)
        far = await stub_b.CancelExecution(pb.CancelExecutionRequest(run_id="run_1", call_id="c_far"))
        assert far.state == pb.EXECUTION_STATE_STARTED  # it runs in replica a
        answered = await asyncio.wait_for(call, 30)
        assert answered.result.status == common_pb2.TOOL_RESULT_STATUS_INTERRUPTED
        assert json.loads(answered.result.details_json)["reason"] == "CALLER_CANCELLED"
    finally:
        for channel in channels:
            await channel.close()


async def _until(predicate, bound_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + bound_s
    while not await predicate():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)
