"""Every malformed request gets a clear status + reason, changes nothing, and the server
keeps serving (issue 3 acceptance; 004 §2.10)."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
import pytest_asyncio
from sessions_helpers import BACKENDS, PG_URL, Env, call, new_session, pg_reachable, ref, result, user

from agentrt.client.channels import open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import details_of, reason_of
from agentrt.mesh.storage.db import sqlite_url
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.needs import unavailable

# One server per backend for the whole module (each test is a tenant of its own), so the
# many cases below cost a request each rather than a server start each.
pytestmark = pytest.mark.asyncio(loop_scope="module")

BAD = grpc.StatusCode.INVALID_ARGUMENT
GONE = grpc.StatusCode.NOT_FOUND
S = ref("s")


def app(*entries: pb.Entry, **kw) -> tuple[str, pb.AppendEntriesRequest]:
    return "AppendEntries", pb.AppendEntriesRequest(session=S, entries=list(entries), **kw)


def item_entry(**item) -> pb.Entry:
    return pb.Entry(kind="item", item=pb.Item(**item))


text_block = cpb.ContentBlock(text=cpb.TextBlock(text="x"))
use_block = cpb.ContentBlock(tool_use=cpb.ToolCall(call_id="c", name="n"))

CASES = [
    # ids
    ("create-bad-id", "CreateSession", pb.CreateSessionRequest(session_id="bad id!"), BAD, "INVALID_ID"),
    (
        "create-bad-parent",
        "CreateSession",
        pb.CreateSessionRequest(parent_session_id="../x"),
        BAD,
        "INVALID_ID",
    ),
    ("create-long-title", "CreateSession", pb.CreateSessionRequest(title="t" * 1001), BAD, "INVALID_VALUE"),
    (
        "create-empty-meta-key",
        "CreateSession",
        pb.CreateSessionRequest(metadata={"": "v"}),
        BAD,
        "INVALID_VALUE",
    ),
    (
        "create-unknown-parent",
        "CreateSession",
        pb.CreateSessionRequest(parent_session_id="zz"),
        GONE,
        "SESSION_NOT_FOUND",
    ),
    (
        "create-taken",
        "CreateSession",
        pb.CreateSessionRequest(session_id="s"),
        grpc.StatusCode.ALREADY_EXISTS,
        "SESSION_EXISTS",
    ),
    ("get-no-ref", "GetSession", pb.GetSessionRequest(), BAD, "MISSING_FIELD"),
    ("get-bad-id", "GetSession", pb.GetSessionRequest(session=ref("a b")), BAD, "INVALID_ID"),
    ("get-neg-gen", "GetSession", pb.GetSessionRequest(session=ref("s", -1)), BAD, "INVALID_VALUE"),
    ("get-unknown", "GetSession", pb.GetSessionRequest(session=ref("unknown")), GONE, "SESSION_NOT_FOUND"),
    ("get-stale-gen", "GetSession", pb.GetSessionRequest(session=ref("s", 999)), GONE, "STALE_GENERATION"),
    ("list-neg-size", "ListSessions", pb.ListSessionsRequest(page_size=-1), BAD, "INVALID_VALUE"),
    ("list-huge-size", "ListSessions", pb.ListSessionsRequest(page_size=5000), BAD, "INVALID_VALUE"),
    (
        "list-bad-token",
        "ListSessions",
        pb.ListSessionsRequest(page_token="%%%not-a-token"),
        BAD,
        "INVALID_VALUE",
    ),
    ("delete-no-ref", "DeleteSession", pb.DeleteSessionRequest(), BAD, "MISSING_FIELD"),
    (
        "delete-stale",
        "DeleteSession",
        pb.DeleteSessionRequest(session=ref("s", 999)),
        GONE,
        "STALE_GENERATION",
    ),
    # appends
    ("append-no-ref", "AppendEntries", pb.AppendEntriesRequest(entries=[user("x")]), BAD, "MISSING_FIELD"),
    (
        "append-unknown",
        "AppendEntries",
        pb.AppendEntriesRequest(session=ref("nope"), entries=[user("x")]),
        GONE,
        "SESSION_NOT_FOUND",
    ),
    (
        "append-stale",
        "AppendEntries",
        pb.AppendEntriesRequest(session=ref("s", 999), entries=[user("x")]),
        GONE,
        "STALE_GENERATION",
    ),
    ("append-none", *app(), BAD, "MISSING_FIELD"),
    ("append-too-many", *app(*[user("x")] * 1001), BAD, "INVALID_VALUE"),
    ("append-no-kind", *app(pb.Entry(payload_json="{}")), BAD, "INVALID_ENTRY"),
    ("append-bad-kind", *app(pb.Entry(kind="has space")), BAD, "INVALID_ENTRY"),
    ("append-item-without-item", *app(pb.Entry(kind="item")), BAD, "INVALID_ENTRY"),
    ("append-empty-item", *app(item_entry()), BAD, "INVALID_ENTRY"),
    (
        "append-two-things",
        *app(
            item_entry(
                message=cpb.Message(content=[text_block]), tool_call=cpb.ToolCall(call_id="c", name="n")
            )
        ),
        BAD,
        "INVALID_ENTRY",
    ),
    (
        "append-call-in-message",
        *app(item_entry(message=cpb.Message(content=[use_block]))),
        BAD,
        "INVALID_ENTRY",
    ),
    ("append-call-no-id", *app(item_entry(tool_call=cpb.ToolCall(name="n"))), BAD, "INVALID_ENTRY"),
    ("append-call-no-name", *app(item_entry(tool_call=cpb.ToolCall(call_id="c"))), BAD, "INVALID_ENTRY"),
    ("append-result-no-id", *app(item_entry(tool_result=cpb.ToolResult(content="x"))), BAD, "INVALID_ENTRY"),
    (
        "append-bad-details",
        *app(item_entry(tool_result=cpb.ToolResult(call_id="c", details_json="{nope"))),
        BAD,
        "INVALID_JSON",
    ),
    # Tool-call arguments are "" or JSON text (common.proto ToolCall); non-JSON goes in
    # invalid_arguments. A stored non-JSON string would break every later model request.
    ("append-call-args-not-json", *app(call("c2", arguments="{{not json")), BAD, "INVALID_JSON"),
    ("append-call-args-too-deep", *app(call("c2", arguments="[" * 100_000)), BAD, "INVALID_JSON"),
    # NaN and Infinity are JSON only to Python's lenient reader (decision 0043).
    ("append-call-args-nan", *app(call("c2", arguments='{"n": NaN}')), BAD, "INVALID_JSON"),
    (
        "append-call-args-and-invalid",
        *app(
            item_entry(tool_call=cpb.ToolCall(call_id="c", name="n", arguments="{}", invalid_arguments="{"))
        ),
        BAD,
        "INVALID_ENTRY",
    ),
    (
        "append-call-block-args-not-json",
        *app(user("ok"), call("c2", arguments="[1,")),
        BAD,
        "INVALID_JSON",
    ),
    # Enum values outside their enums.
    (
        "append-role-out-of-range",
        *app(item_entry(message=cpb.Message(role=77, content=[text_block]))),
        BAD,
        "INVALID_ENTRY",
    ),
    (
        "append-source-out-of-range",
        *app(item_entry(message=cpb.Message(role=cpb.ROLE_USER, content=[text_block]), source=99)),
        BAD,
        "INVALID_ENTRY",
    ),
    (
        "append-status-out-of-range",
        *app(item_entry(tool_result=cpb.ToolResult(call_id="c1", content="x", status=42))),
        BAD,
        "INVALID_ENTRY",
    ),
    ("append-entry-over-4mib", *app(user("x" * (4 * 1024 * 1024 + 1))), BAD, "REQUEST_TOO_LARGE"),
    ("append-bad-payload", *app(pb.Entry(kind="custom", payload_json="{not json")), BAD, "INVALID_JSON"),
    ("append-bad-extra", *app(user("x", display=pb.Display(extra_json="[1,"))), BAD, "INVALID_JSON"),
    ("append-extra-not-object", *app(user("x", display=pb.Display(extra_json="[1]"))), BAD, "INVALID_JSON"),
    (
        "append-update-no-target",
        *app(pb.Entry(kind="update", display=pb.Display(title="t"))),
        BAD,
        "INVALID_ENTRY",
    ),
    ("append-compaction-empty", *app(pb.Entry(kind="compaction", summary="s")), BAD, "INVALID_ENTRY"),
    (
        "append-compaction-bad-id",
        *app(pb.Entry(kind="compaction", folded_entry_ids=["a b"])),
        BAD,
        "INVALID_ID",
    ),
    ("append-leaf-no-target", *app(pb.Entry(kind="leaf")), BAD, "INVALID_ENTRY"),
    ("append-leaf-unknown", *app(pb.Entry(kind="leaf", leaf_entry_id="ent_x")), GONE, "ENTRY_NOT_FOUND"),
    ("append-bad-run-id", *app(user("x", run_id="run id")), BAD, "INVALID_ID"),
    ("append-neg-turn", *app(user("x", turn=-1)), BAD, "INVALID_VALUE"),
    ("append-neg-usage", *app(user("x", usage=cpb.Usage(input_tokens=-5))), BAD, "INVALID_VALUE"),
    ("append-neg-expected", *app(user("x"), expected_last_seq=-1), BAD, "INVALID_VALUE"),
    (
        "append-stale-expected",
        *app(user("x"), expected_last_seq=12345),
        grpc.StatusCode.ABORTED,
        "SEQ_MISMATCH",
    ),
    # reads
    (
        "list-entries-neg-cursor",
        "ListEntries",
        pb.ListEntriesRequest(session=S, after_seq=-1),
        BAD,
        "INVALID_VALUE",
    ),
    (
        "list-entries-unknown",
        "ListEntries",
        pb.ListEntriesRequest(session=ref("zz")),
        GONE,
        "SESSION_NOT_FOUND",
    ),
    ("context-neg-cursor", "GetContext", pb.GetContextRequest(session=S, after_seq=-3), BAD, "INVALID_VALUE"),
    ("context-stale", "GetContext", pb.GetContextRequest(session=ref("s", 999)), GONE, "STALE_GENERATION"),
    # tree
    ("switch-no-leaf", "SwitchBranch", pb.SwitchBranchRequest(session=S), BAD, "MISSING_FIELD"),
    (
        "switch-bad-leaf",
        "SwitchBranch",
        pb.SwitchBranchRequest(session=S, leaf_entry_id="a b"),
        BAD,
        "INVALID_ID",
    ),
    (
        "switch-unknown-leaf",
        "SwitchBranch",
        pb.SwitchBranchRequest(session=S, leaf_entry_id="ent_q"),
        GONE,
        "ENTRY_NOT_FOUND",
    ),
    (
        "fork-bad-new-id",
        "ForkSession",
        pb.ForkSessionRequest(session=S, new_session_id="a/b"),
        BAD,
        "INVALID_ID",
    ),
    (
        "fork-unknown-leaf",
        "ForkSession",
        pb.ForkSessionRequest(session=S, leaf_entry_id="ent_q"),
        GONE,
        "ENTRY_NOT_FOUND",
    ),
    (
        "fork-taken",
        "ForkSession",
        pb.ForkSessionRequest(session=S, new_session_id="s"),
        grpc.StatusCode.ALREADY_EXISTS,
        "SESSION_EXISTS",
    ),
    (
        "replace-neg",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(session=S, expected_last_seq=-1),
        BAD,
        "INVALID_VALUE",
    ),
    (
        "replace-stale-seq",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(session=S, expected_last_seq=0),
        grpc.StatusCode.ABORTED,
        "SEQ_MISMATCH",
    ),
    (
        "replace-leaf",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(session=S, entries=[pb.Entry(kind="leaf", leaf_entry_id="ent_a")]),
        BAD,
        "INVALID_ENTRY",
    ),
    (
        "replace-bad-json",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(session=S, entries=[pb.Entry(kind="custom", payload_json="nan nan")]),
        BAD,
        "INVALID_JSON",
    ),
    (
        "replace-call-args-not-json",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(
            session=S, expected_last_seq=3, entries=[user("q"), call("c9", arguments="{{x")]
        ),
        BAD,
        "INVALID_JSON",
    ),
    (
        "replace-role-out-of-range",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(
            session=S,
            expected_last_seq=3,
            entries=[item_entry(message=cpb.Message(role=77, content=[text_block]))],
        ),
        BAD,
        "INVALID_ENTRY",
    ),
    (
        "replace-entry-over-4mib",
        "ReplaceEntries",
        pb.ReplaceEntriesRequest(session=S, expected_last_seq=3, entries=[user("x" * (4 * 1024 * 1024 + 1))]),
        BAD,
        "REQUEST_TOO_LARGE",
    ),
    (
        "recover-bad-tool",
        "RecoverSession",
        pb.RecoverSessionRequest(session=S, retry_safe_tools=["a b"]),
        BAD,
        "INVALID_VALUE",
    ),
    (
        "recover-unknown",
        "RecoverSession",
        pb.RecoverSessionRequest(session=ref("zz")),
        GONE,
        "SESSION_NOT_FOUND",
    ),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def shared_server(request, tmp_path_factory):
    if request.param == "sqlite":
        url = sqlite_url(str(tmp_path_factory.mktemp("bad")), "sessions")
    elif await pg_reachable():
        url = PG_URL
    else:
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    server = build_server(SessionsConfig(server=ServerConfig(port=0, db_url=url)))
    port = await server.start()
    yield f"127.0.0.1:{port}", url
    await server.stop(grace=0)


@pytest_asyncio.fixture(loop_scope="module")
async def tenant_env(shared_server):
    address, url = shared_server
    tenant = "b-" + uuid.uuid4().hex[:20]
    channel = open_channel(address, tenant=tenant)
    yield Env(address, tenant, pb_grpc.SessionServiceStub(channel), url, [channel])
    await channel.close()


async def _snapshot(stub) -> tuple:
    sessions = (await stub.ListSessions(pb.ListSessionsRequest(include_hidden=True))).sessions
    entries = (await stub.ListEntries(pb.ListEntriesRequest(session=S))).entries
    return [(s.session_id, s.generation, s.entry_count) for s in sessions], list(entries)


@pytest.mark.parametrize(("name", "method", "request_", "code", "reason"), CASES, ids=[c[0] for c in CASES])
async def test_bad_request_is_refused_and_changes_nothing(tenant_env, name, method, request_, code, reason):
    env = tenant_env
    await new_session(env.stub, "s")
    await env.stub.AppendEntries(
        pb.AppendEntriesRequest(session=S, entries=[user("q"), call("c1"), result("c1")])
    )
    before = await _snapshot(env.stub)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await getattr(env.stub, method)(request_)
    assert info.value.code() == code, info.value.details()
    assert reason_of(info.value) == reason, info.value.details()
    assert await _snapshot(env.stub) == before
    # The server keeps serving.
    await env.stub.AppendEntries(pb.AppendEntriesRequest(session=S, entries=[user("still here")]))


@pytest.mark.parametrize(
    ("entries", "field"),
    [
        ([user("q"), call("c2", arguments="{{not json")], "entries[1].item.tool_call.arguments"),
        (
            [user("q"), user("r"), item_entry(message=cpb.Message(role=77, content=[text_block]))],
            "entries[2].item.message.role",
        ),
        (
            [call("c2"), item_entry(tool_result=cpb.ToolResult(call_id="c2", status=42))],
            "entries[1].item.tool_result.status",
        ),
    ],
    ids=["arguments", "role", "status"],
)
async def test_refused_entry_is_named_and_the_session_still_runs(tenant_env, entries, field):
    env = tenant_env
    await new_session(env.stub, "s")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.stub.AppendEntries(pb.AppendEntriesRequest(session=S, entries=entries))
    _, metadata, _ = details_of(info.value)
    assert metadata["field"].startswith(field), metadata
    # Nothing was stored, so the session's context stays renderable.
    assert list((await env.stub.GetContext(pb.GetContextRequest(session=S))).entries) == []
    # Valid arguments are kept exactly as sent (never re-serialized).
    odd = '{ "b":1,"a" :[1.0, 2e3] }'
    await env.stub.AppendEntries(pb.AppendEntriesRequest(session=S, entries=[call("c3", arguments=odd)]))
    ctx = await env.stub.GetContext(pb.GetContextRequest(session=S))
    assert ctx.entries[0].item.tool_call.arguments == odd


async def test_a_generation_never_made_is_told_apart_from_one_gone(tenant_env):
    env = tenant_env
    await new_session(env.stub, "s")
    await env.stub.DeleteSession(pb.DeleteSessionRequest(session=S))
    await new_session(env.stub, "s")  # generation 2; generation 1 is gone
    for generation, words in (
        (1, "generation 1 is gone (current is 2)"),
        (99, "generation 99 was never made"),
    ):
        for send in (
            lambda r: env.stub.AppendEntries(pb.AppendEntriesRequest(session=r, entries=[user("x")])),
            lambda r: env.stub.GetSession(pb.GetSessionRequest(session=r)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await send(ref("s", generation))
            assert info.value.code() == GONE and reason_of(info.value) == "STALE_GENERATION"
            assert words in (info.value.details() or ""), info.value.details()
    assert (await env.stub.ListEntries(pb.ListEntriesRequest(session=S))).entries == []


async def test_watch_with_a_negative_cursor_is_invalid(tenant_env):
    env = tenant_env
    await new_session(env.stub, "s")
    stream = env.watch(pb.WatchSessionRequest(session=S, after_seq=-1))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(stream.read(), 15)
    assert info.value.code() == BAD and reason_of(info.value) == "INVALID_VALUE"


async def test_non_utf8_text_is_invalid_argument(tenant_env):
    env = tenant_env
    await new_session(env.stub, "s")
    # CreateSessionRequest field 4 (title), wire type 2, two bytes that are not UTF-8.
    raw = bytes([0x22, 0x02, 0xFF, 0xFE])
    channel = env.channels[0]
    method = channel.unary_unary("/agentrt.v1.SessionService/CreateSession")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await method(raw, metadata=(("x-agentrt-tenant", env.tenant),))
    assert info.value.code() == BAD and reason_of(info.value) == "INVALID_UTF8"
    assert [s.session_id for s in (await env.stub.ListSessions(pb.ListSessionsRequest())).sessions] == ["s"]


@pytest.mark.asyncio(loop_scope="function")
async def test_oversize_append_is_refused(start_server, db_url):
    config = SessionsConfig(server=ServerConfig(port=0, db_url=db_url, max_request_bytes=4096))
    address = await start_server(build_server(config))
    async with open_channel(address, tenant="oversize-" + db_url[:6].replace(":", "")) as channel:
        stub = pb_grpc.SessionServiceStub(channel)
        session = await new_session(stub)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.AppendEntries(
                pb.AppendEntriesRequest(session=ref(session.session_id), entries=[user("x" * 5000)])
            )
        assert info.value.code() == BAD and reason_of(info.value) == "REQUEST_TOO_LARGE"
        entries = await stub.ListEntries(pb.ListEntriesRequest(session=ref(session.session_id)))
        assert list(entries.entries) == []
