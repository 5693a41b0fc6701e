"""Local streams of calls (mesh/local_calls.py): in one process, a call answers what the wire answers.

Against the production session store (its own CallsMethod, as `agentrt serve all` hosts it):
the stored entries and the tail, SEQ_MISMATCH and MISSING_FIELD with their reasons, the
tenant's scope, the request-size bound as the interceptor applies it, the calls counted as
AppendEntries RPCs at the server. With a handler under the test's control: progress before
the answer, a caller that stops waiting, a deadline, a peer that stops under a call, the
handler's own context, and messages that neither side can change under the other.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid

import pytest

from agentrt.client.calls import CallStream, StreamBroken
from agentrt.client.channels import open_channel
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.calls import CallsMethod
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.context import current_tenant
from agentrt.mesh.local_calls import LocalCalls
from agentrt.mesh.storage.db import sqlite_url
from agentrt.runs.peers.streams import _append_request, _append_split, _execute_request, _execute_split
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from agentrt.v1 import tool_service_pb2 as tpb

_caller_mark: contextvars.ContextVar[str] = contextvars.ContextVar("caller_mark", default="unset")


def _user(text: str) -> spb.Entry:
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    return spb.Entry(kind="item", item=spb.Item(message=msg))


class _Store:
    """A running session store, hosted for local calls, and a gRPC stub to check it with."""

    def __init__(self, server, address: str, limit: int) -> None:
        self.server = server
        self.tenant = "t-" + uuid.uuid4().hex[:12]
        self.hosted = LocalCalls()
        self.hosted.host("sessions", server.calls(), limit, server.telemetry)
        self.channel = open_channel(address, tenant=self.tenant)
        self.stub = spb_grpc.SessionServiceStub(self.channel)

    def calls(self, tenant: str | None = None) -> CallStream:
        return CallStream(
            self.hosted.opener("sessions", tenant or self.tenant), _append_request, _append_split
        )

    async def session(self) -> spb.SessionRef:
        created = await self.stub.CreateSession(spb.CreateSessionRequest())
        return spb.SessionRef(session_id=created.session.session_id)

    async def texts(self, ref: spb.SessionRef) -> list[str]:
        listed = await self.stub.ListEntries(spb.ListEntriesRequest(session=ref))
        return [e.item.message.content[0].text.text for e in listed.entries]


async def _store(start_server, tmp_path, limit: int = 16 * 1024 * 1024) -> _Store:
    config = SessionsConfig(server=ServerConfig(port=0, db_url=sqlite_url(str(tmp_path), "s")))
    server = build_server(config)
    address = await start_server(server)
    return _Store(server, address, limit)


async def test_appends_answer_as_over_the_wire_with_the_tail(start_server, tmp_path):
    store = await _store(start_server, tmp_path)
    ref = await store.session()
    calls = store.calls()
    first = await calls.call(
        spb.AppendEntriesRequest(session=ref, entries=[_user("a")], expected_last_seq=0, include_tail=True),
        timeout=30,
    )
    assert [e.seq for e in first.entries] == [1] and first.tail_last_seq == 1
    await store.stub.AppendEntries(spb.AppendEntriesRequest(session=ref, entries=[_user("foreign")]))
    second = await calls.call(
        spb.AppendEntriesRequest(session=ref, entries=[_user("b")], include_tail=True), timeout=30
    )
    assert [e.seq for e in second.entries] == [3] and second.tail_last_seq == 3
    assert await store.texts(ref) == ["a", "foreign", "b"]
    assert calls.opened == 1
    calls.close()
    await store.channel.close()


async def test_refusals_carry_the_rpcs_status_and_reason_and_change_nothing(start_server, tmp_path):
    store = await _store(start_server, tmp_path)
    ref = await store.session()
    calls = store.calls()
    await calls.call(
        spb.AppendEntriesRequest(session=ref, entries=[_user("a")], expected_last_seq=0), timeout=30
    )
    with pytest.raises(MeshError) as stale:
        await calls.call(
            spb.AppendEntriesRequest(session=ref, entries=[_user("b")], expected_last_seq=0), timeout=30
        )
    assert (stale.value.status, stale.value.reason) == (Status.ABORTED, Reason.SEQ_MISMATCH)
    with pytest.raises(MeshError) as empty:
        await calls.call(spb.AppendEntriesRequest(session=ref), timeout=30)
    assert (empty.value.status, empty.value.reason) == (Status.INVALID_ARGUMENT, Reason.MISSING_FIELD)
    with pytest.raises(MeshError) as foreign:  # another tenant's stream does not see the session
        await store.calls(tenant=store.tenant + "-other").call(
            spb.AppendEntriesRequest(session=ref, entries=[_user("x")]), timeout=30
        )
    assert foreign.value.status == Status.NOT_FOUND
    assert await store.texts(ref) == ["a"]
    ok = await calls.call(spb.AppendEntriesRequest(session=ref, entries=[_user("c")]), timeout=30)
    assert [e.seq for e in ok.entries] == [2] and calls.opened == 1  # the stream served on
    calls.close()
    await store.channel.close()


async def test_a_request_over_the_bound_is_refused_as_the_interceptor_refuses_it(start_server, tmp_path):
    store = await _store(start_server, tmp_path, limit=2048)
    ref = await store.session()
    calls = store.calls()
    with pytest.raises(MeshError) as refused:
        await calls.call(spb.AppendEntriesRequest(session=ref, entries=[_user("x" * 4096)]), timeout=30)
    assert (refused.value.status, refused.value.reason) == (Status.INVALID_ARGUMENT, Reason.REQUEST_TOO_LARGE)
    assert refused.value.metadata.get("limit_bytes") == "2048"
    assert await store.texts(ref) == []
    ok = await calls.call(spb.AppendEntriesRequest(session=ref, entries=[_user("small")]), timeout=30)
    assert [e.seq for e in ok.entries] == [1]
    assert calls.opened == 2  # the refusal ended that stream, as over the wire; the next call opened one
    calls.close()
    await store.channel.close()


async def test_local_calls_are_counted_as_rpcs_of_their_method(start_server, tmp_path):
    store = await _store(start_server, tmp_path)
    ref = await store.session()
    calls = store.calls()
    await calls.call(spb.AppendEntriesRequest(session=ref, entries=[_user("a")]), timeout=30)
    with pytest.raises(MeshError):
        await calls.call(spb.AppendEntriesRequest(session=ref), timeout=30)
    calls.close()
    counted = {
        s.labels["code"]: s.value
        for family in store.server.registry.collect()
        for s in family.samples
        if s.name == "agentrt_rpc_server_requests_total" and s.labels.get("method") == "AppendEntries"
    }
    assert counted == {"OK": 1.0, "INVALID_ARGUMENT": 1.0}
    await store.channel.close()


# -- a handler under the test's control (the tool service's envelopes) ------------------------


class _Handler:
    """A CallsMethod whose calls the test steers: progress, hold, answer; what each saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.seen: list[tuple[str, str]] = []  # (tenant, the caller's context mark)
        self.requests: list[tpb.ExecuteToolCallsRequest] = []
        self.answers: list[tpb.ExecuteToolResponse] = []

    async def handle(self, call: tpb.ExecuteToolCallsRequest, ctx) -> object:
        self.seen.append((current_tenant(), _caller_mark.get()))
        self.requests.append(call)
        self.started.set()
        try:
            yield tpb.ToolProgress(stream="stdout", text="one")
            yield tpb.ToolProgress(stream="stdout", text="two")
            if call.request.call.name == "hold":
                await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        answer = tpb.ExecuteToolResponse(
            result=cpb.ToolResult(call_id=call.request.call.call_id, content="done")
        )
        self.answers.append(answer)
        yield answer

    def method(self) -> CallsMethod:
        def answer(call_id: int, message: object) -> tpb.ExecuteToolCallsResponse:
            if isinstance(message, tpb.ToolProgress):
                return tpb.ExecuteToolCallsResponse(call_id=call_id, progress=message)
            return tpb.ExecuteToolCallsResponse(call_id=call_id, result=message)  # type: ignore[arg-type]

        return CallsMethod(
            "agentrt.v1.ToolService",
            "ExecuteTool",
            self.handle,  # type: ignore[arg-type]
            answer,
            lambda call_id, error: tpb.ExecuteToolCallsResponse(call_id=call_id, error=error),
        )


def _tool_calls(handler: _Handler, tenant: str = "acme") -> tuple[LocalCalls, CallStream]:
    hosted = LocalCalls()
    hosted.host("tools", handler.method(), 1 << 20)
    return hosted, CallStream(hosted.opener("tools", tenant), _execute_request, _execute_split)


def _request(name: str = "quick") -> tuple[tpb.ExecuteToolRequest, bool]:
    return tpb.ExecuteToolRequest(
        run_id="r", call=cpb.ToolCall(call_id="c1", name=name, arguments="{}")
    ), True


async def test_progress_comes_before_the_answer_in_the_handlers_own_context():
    handler = _Handler()
    _, calls = _tool_calls(handler, tenant="acme")
    _caller_mark.set("the caller's")
    progress: list[str] = []
    answer = await calls.call(_request(), timeout=30, on_event=lambda p: progress.append(p.text))
    assert progress == ["one", "two"] and answer.result.content == "done"
    # The handler ran with the stream's tenant, not with the caller's context variables.
    assert handler.seen == [("acme", "unset")]
    calls.close()


async def test_neither_side_can_change_a_message_under_the_other():
    handler = _Handler()
    _, calls = _tool_calls(handler)
    request, progress = _request()
    answer = await calls.call((request, progress), timeout=30)
    request.call.name = "changed-by-the-caller"
    answer.result.content = "changed-by-the-caller"
    assert handler.requests[0].request.call.name == "quick"
    assert handler.answers[0].result.content == "done"
    handler.requests[0].request.call.call_id = "changed-by-the-handler"
    assert request.call.call_id == "c1"
    calls.close()


async def test_a_caller_that_stops_waiting_cancels_the_call_at_the_peer():
    handler = _Handler()
    _, calls = _tool_calls(handler)
    waiting = asyncio.create_task(calls.call(_request("hold"), timeout=30))
    await handler.started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(handler.cancelled.wait(), 10)  # a hang guard, not a timing claim
    answer = await calls.call(_request(), timeout=30)  # the stream serves on
    assert answer.result.content == "done" and calls.opened == 1
    calls.close()


async def test_a_call_past_its_deadline_is_deadline_exceeded_and_ended_at_the_peer():
    handler = _Handler()
    _, calls = _tool_calls(handler)
    with pytest.raises(MeshError) as late:
        await calls.call(_request("hold"), timeout=0.05)
    assert late.value.status == Status.DEADLINE_EXCEEDED
    await asyncio.wait_for(handler.cancelled.wait(), 10)
    calls.close()


async def test_a_peer_that_stops_breaks_its_calls_and_every_later_one():
    handler = _Handler()
    hosted, calls = _tool_calls(handler)
    waiting = asyncio.create_task(calls.call(_request("hold"), timeout=30))
    await handler.started.wait()
    hosted.close("tools")
    with pytest.raises(StreamBroken):
        await asyncio.wait_for(waiting, 10)
    assert handler.cancelled.is_set()  # the call in flight was ended, as a stopped server's RPCs are
    assert not hosted.hosts("tools")
    with pytest.raises(StreamBroken):  # a new stream to a stopped peer ends at once
        await asyncio.wait_for(calls.call(_request(), timeout=30), 10)
    calls.close()
