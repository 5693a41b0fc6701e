"""ExecuteToolCalls: ExecuteTool calls over one long-lived stream (mesh/calls.py, client/calls.py).

The production tool service on 127.0.0.1:0 and a real channel; each call over the stream must
answer what the same call as its own ExecuteTool RPC answers (results, errors with status and
reason, replays from the journal), several may run at once, a call past its deadline or
cancelled by its caller is cancelled at the server, and a stream refused as a whole fails its
calls with the refusal. Commands run in the real local sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator

import grpc
import pytest

from agentrt.client.calls import CallStream, CallsUnsupported, StreamBroken
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.server import MeshServer
from agentrt.runs.peers.streams import _execute_request, _execute_split
from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc
from tests.conftest import rpc_error_reason


def _stream(tools, metadata=()) -> CallStream:
    stub = tools.stub
    return CallStream(
        lambda: stub.ExecuteToolCalls(metadata=list(metadata)), _execute_request, _execute_split
    )


async def test_a_call_answers_as_its_rpc_and_a_repeat_is_replayed(tools):
    calls = _stream(tools)
    request = tools.request("exec_command", {"cmd": "echo hello"}, call_id="call_same")
    first = await calls.call((request, False), timeout=30)
    assert first.result.content == "hello\n" and not first.replayed
    again = await calls.call((request, False), timeout=30)  # answered from the journal
    assert again.replayed and again.result.content == first.result.content
    unary = await tools.stub.ExecuteTool(request)
    assert unary.replayed and unary.result == again.result
    assert calls.opened == 1  # both calls went over one stream
    calls.close()


async def test_errors_carry_the_status_and_reason_of_the_rpc(tools):
    calls = _stream(tools)
    bad = pb.ExecuteToolRequest(run_id="run_1", call=common_pb2.ToolCall(call_id="c1", name="no_such_tool"))
    with pytest.raises(MeshError) as over_stream:
        await calls.call((bad, False), timeout=30)
    with pytest.raises(grpc.aio.AioRpcError) as over_rpc:
        await tools.stub.ExecuteTool(bad)
    assert over_stream.value.status == Status.INVALID_ARGUMENT
    assert over_rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert over_stream.value.reason == Reason.UNKNOWN_TOOL
    # the stream goes on serving after a refused call
    request = tools.request("exec_command", {"cmd": "echo ok"}, call_id="c2")
    ok = await calls.call((request, False), timeout=30)
    assert ok.result.content == "ok\n"
    calls.close()


async def test_calls_in_flight_at_once_answer_each_its_own(tools):
    # Each command marks itself, then waits (at most 20 s) until all three marks exist: calls
    # served one after another would each wait alone and answer "alone".
    calls = _stream(tools)
    wait = (
        "touch mI; n=0; while [ ! -f m0 ] || [ ! -f m1 ] || [ ! -f m2 ]; do n=$((n+1)); "
        "if [ $n -gt 400 ]; then echo alone; exit 0; fi; sleep 0.05; done; echo metI"
    )
    answers = await asyncio.gather(
        *(
            calls.call(
                (tools.request("exec_command", {"cmd": wait.replace("I", str(i))}, call_id=f"p{i}"), False),
                timeout=60,
            )
            for i in range(3)
        )
    )
    assert [a.result.content for a in answers] == ["met0\n", "met1\n", "met2\n"]
    assert calls.opened == 1
    calls.close()


async def test_progress_comes_before_the_result(tools):
    calls = _stream(tools)
    chunks: list[str] = []
    request = tools.request("exec_command", {"cmd": "echo one; sleep 0.3; echo two"}, call_id="prog_1")
    answer = await calls.call((request, True), timeout=30, on_event=lambda p: chunks.append(p.text))
    assert "".join(chunks) == "one\ntwo\n" and answer.result.content == "one\ntwo\n"
    calls.close()


async def test_a_call_past_its_deadline_is_ended_at_the_server(tools):
    # The deadline the header carries is the call's own (as an RPC's): the service kills the
    # command at it and journals the call, so its repeat (as an RPC) ends as the first did.
    calls = _stream(tools)
    request = tools.request("exec_command", {"cmd": "sleep 30; echo late"}, call_id="slow_1")
    with pytest.raises(MeshError) as late:
        await calls.call((request, False), timeout=1.0)
    assert late.value.status == Status.DEADLINE_EXCEEDED
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await tools.stub.ExecuteTool(request, timeout=30)
    assert again.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "the command was killed" in (again.value.details() or "")  # the journal's answer
    calls.close()


async def test_a_bad_call_id_is_refused_and_the_stream_goes_on(tools):
    call = tools.stub.ExecuteToolCalls()
    request = tools.request("exec_command", {"cmd": "echo x"}, call_id="idz")
    await call.write(pb.ExecuteToolCallsRequest(header=common_pb2.CallHeader(call_id=0), request=request))
    refused = await call.read()
    assert refused.call_id == 0 and refused.error.reason == "INVALID_ID"
    await call.write(pb.ExecuteToolCallsRequest(header=common_pb2.CallHeader(call_id=7), request=request))
    answered = await call.read()
    assert answered.call_id == 7 and answered.result.result.content == "x\n"
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_a_call_id_reused_while_in_flight_ends_the_stream_not_the_call_twice(tools):
    """A refusal tagged with a live call's id would be that call's second final message.

    Found by a break-it session: the duplicate was answered with a CallError tagged 7, then the
    first call 7 sent its result too. Now the stream ends INVALID_ARGUMENT/INVALID_ID and call 7
    gets no final message of its own (as when any stream ends with calls in flight).
    """
    call = tools.stub.ExecuteToolCalls()
    slow = tools.request("exec_command", {"cmd": "sleep 1; echo first"}, call_id="c_first")
    other = tools.request("exec_command", {"cmd": "echo second"}, call_id="c_second")
    await call.write(pb.ExecuteToolCallsRequest(header=common_pb2.CallHeader(call_id=7), request=slow))
    await call.write(pb.ExecuteToolCallsRequest(header=common_pb2.CallHeader(call_id=7), request=other))
    finals = []
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        while (message := await asyncio.wait_for(call.read(), 30)) != grpc.aio.EOF:
            if message.WhichOneof("event") in ("result", "error"):
                finals.append((message.call_id, message.WhichOneof("event")))
    assert finals == []
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rpc_error_reason(ended.value) == "INVALID_ID" and "already in flight" in ended.value.details()
    assert not (await tools.sh("echo still-serving")).is_error


async def test_a_refused_stream_fails_its_calls_with_the_refusal(start_server, tmp_path):
    from tools_helpers import make_config

    config = make_config(tmp_path)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, auth_token="sekret"))
    address = await start_server(build_server(config))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        calls = CallStream(lambda: stub.ExecuteToolCalls(), _execute_request, _execute_split)
        request = pb.ExecuteToolRequest(
            run_id="r", call=common_pb2.ToolCall(call_id="c", name="exec_command", arguments=json.dumps({}))
        )
        with pytest.raises(MeshError) as refused:
            await calls.call((request, False), timeout=30)
        assert refused.value.status == Status.UNAUTHENTICATED
        calls.close()


async def test_a_service_without_the_stream_says_so(start_server):
    # An older service (no ExecuteToolCalls): the caller is told to use the RPC.
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ToolServiceStub(channel)
            calls = CallStream(lambda: stub.ExecuteToolCalls(), _execute_request, _execute_split)
            with pytest.raises(CallsUnsupported):
                await calls.call((pb.ExecuteToolRequest(), False), timeout=10)
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def _second_server(start_server, tmp_path) -> AsyncIterator[tuple[MeshServer, CallStream]]:
    """A tool service of its own (to stop) and a stream of calls to it."""
    from tools_helpers import make_config

    server = build_server(make_config(tmp_path / "second"))
    address = await start_server(server)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        yield server, CallStream(lambda: stub.ExecuteToolCalls(), _execute_request, _execute_split)


async def test_a_stream_whose_server_stops_breaks_its_calls(tools, start_server, tmp_path):
    async with _second_server(start_server, tmp_path) as (server, calls):
        request = tools.request("exec_command", {"cmd": "sleep 5; echo late"}, call_id="brk_1")
        pending = asyncio.ensure_future(calls.call((request, False), timeout=30))
        await asyncio.sleep(0.5)
        await server.stop(grace=0)
        with pytest.raises(StreamBroken):
            await pending
        calls.close()


async def test_a_draining_server_answers_the_calls_it_took_runs_none_after_and_ends_the_stream(
    tools, start_server, tmp_path
):
    # A rolling restart SIGTERMs a replica whose streams its callers keep open. The stream must
    # not run calls until the drain's grace runs out and then have the last ones cancelled
    # mid-way (a tool call whose outcome nobody knows): the call it took answers in full, a
    # call sent after the drain began is never run (its caller sees StreamBroken and may send
    # it elsewhere), and the stream ends OK at once, not when the grace ends.
    async with _second_server(start_server, tmp_path) as (server, calls):
        first = tools.request("exec_command", {"cmd": "touch began; sleep 1; echo first"}, call_id="drain_1")
        taken = asyncio.ensure_future(calls.call((first, False), timeout=60))
        while not (tools.workspace / "began").exists():
            await asyncio.sleep(0.02)
        stream = calls._stream
        assert stream is not None
        stopping = asyncio.ensure_future(server.stop(grace=60))
        while not server.drain_deadline:
            await asyncio.sleep(0.01)
        late = tools.request("exec_command", {"cmd": "touch ran_late; echo late"}, call_id="drain_2")
        with pytest.raises(StreamBroken):
            await calls.call((late, False), timeout=60)
        assert (await taken).result.content == "first\n"
        assert await stream.call.code() == grpc.StatusCode.OK  # ended by the server, not cancelled
        await stopping
        assert not (tools.workspace / "ran_late").exists()
        calls.close()


async def test_a_call_its_caller_stops_waiting_for_is_cancelled_at_the_server(start_server, tmp_path):
    # As a cancelled ExecuteTool: the handler is cancelled (counted CANCELLED) and the command
    # runs on to its end, journaled, so a repeat is answered from the journal.
    from tools_helpers import ToolsEnv, make_config

    config = make_config(tmp_path)
    server = build_server(config)
    address = await start_server(server)
    async with grpc.aio.insecure_channel(address) as channel:
        tools = ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws")
        calls = _stream(tools)
        request = tools.request("exec_command", {"cmd": "sleep 1; echo done"}, call_id="gone_1")
        waiting = asyncio.ensure_future(calls.call((request, False), timeout=30))
        while not (tmp_path / "ws").exists():  # the call reached the service (its workspace is made)
            await asyncio.sleep(0.02)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

        def cancelled() -> float:
            return sum(
                s.value
                for family in server.registry.collect()
                for s in family.samples
                if s.name == "agentrt_rpc_server_requests_total"
                and s.labels.get("method") == "ExecuteTool"
                and s.labels.get("code") == "CANCELLED"
            )

        async def counted() -> None:
            while cancelled() < 1:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(counted(), 30)
        again = await tools.stub.ExecuteTool(request, timeout=30)  # the command ran on, journaled
        assert again.result.content == "done\n"
        calls.close()
