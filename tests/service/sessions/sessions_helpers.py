"""Builders and readers shared by the SessionService conformance tests."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import pytest

from agentrt.client.channels import open_channel
from agentrt.mesh.context import TENANT_HEADER
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.stores import PG_URL, pg_reachable  # noqa: F401 - re-exported to the suite

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@dataclass
class Env:
    """A running SessionService and ways to talk to it as one tenant."""

    address: str
    tenant: str
    stub: pb_grpc.SessionServiceStub
    db_url: str
    channels: list[grpc.aio.Channel]

    def watch(self, request: pb.WatchSessionRequest, stub: pb_grpc.SessionServiceStub | None = None):
        """Open a WatchSession stream as this env's tenant.

        The tenant goes in explicitly: `open_channel`'s metadata interceptor is registered
        for unary calls only (grpc.aio files an object under its first matching interceptor
        kind), so server-streaming calls would otherwise go out as the default tenant.
        """
        return (stub or self.stub).WatchSession(request, metadata=((TENANT_HEADER, self.tenant),))

    def as_tenant(self, tenant: str) -> pb_grpc.SessionServiceStub:
        """Return a stub whose calls are scoped to another tenant."""
        channel = open_channel(self.address, tenant=tenant)
        self.channels.append(channel)
        return pb_grpc.SessionServiceStub(channel)


def ref(session_id: str, generation: int = 0) -> pb.SessionRef:
    return pb.SessionRef(session_id=session_id, generation=generation)


def user(text: str, **kw) -> pb.Entry:
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    return pb.Entry(kind="item", item=pb.Item(message=msg, source=pb.ITEM_SOURCE_USER), **kw)


def assistant(text: str, **kw) -> pb.Entry:
    msg = cpb.Message(role=cpb.ROLE_ASSISTANT, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    return pb.Entry(kind="item", item=pb.Item(message=msg, source=pb.ITEM_SOURCE_MODEL), **kw)


def call(call_id: str, name: str = "exec_command", arguments: str = '{"cmd": "ls"}', **kw) -> pb.Entry:
    tc = cpb.ToolCall(call_id=call_id, name=name, arguments=arguments)
    return pb.Entry(kind="item", item=pb.Item(tool_call=tc, source=pb.ITEM_SOURCE_MODEL), **kw)


def result(call_id: str, content: str = "ok", name: str = "exec_command", **kw) -> pb.Entry:
    tr = cpb.ToolResult(call_id=call_id, name=name, content=content, status=cpb.TOOL_RESULT_STATUS_OK)
    return pb.Entry(kind="item", item=pb.Item(tool_result=tr, source=pb.ITEM_SOURCE_TOOL), **kw)


def text_of(entry: pb.Entry) -> str:
    """The text of a message entry, the content of a result, the call id of a call."""
    item = entry.item
    if item.HasField("message"):
        return "".join(b.text.text for b in item.message.content)
    if item.HasField("tool_result"):
        return item.tool_result.content
    if item.HasField("tool_call"):
        return "call:" + item.tool_call.call_id
    return entry.summary or entry.kind


async def new_session(stub: pb_grpc.SessionServiceStub, session_id: str = "", **kw) -> pb.Session:
    return (await stub.CreateSession(pb.CreateSessionRequest(session_id=session_id, **kw))).session


async def append(
    stub: pb_grpc.SessionServiceStub, session_id: str, *entries: pb.Entry, generation: int = 0, **kw
) -> list[pb.Entry]:
    resp = await stub.AppendEntries(
        pb.AppendEntriesRequest(session=ref(session_id, generation), entries=list(entries), **kw)
    )
    return list(resp.entries)


async def context_texts(stub: pb_grpc.SessionServiceStub, session_id: str, **kw) -> list[str]:
    resp = await stub.GetContext(pb.GetContextRequest(session=ref(session_id), **kw))
    return [text_of(e) for e in resp.entries]
