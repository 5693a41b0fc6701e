"""Issue 10 in the session store, on SQLite and PostgreSQL: what a session holds keeps its shape.

- A repeated provider response id: usage attribution (004 §2.7f) is per model response,
  and a response is (run, turn, response id), so a compatible server that mints the same
  id twice does not make the second turn's bill a "double" one.
- Bad bytes: an escape of a lone surrogate in a stored call's arguments (or any JSON text
  field) is normalized on the way in, every other byte kept, so no stored entry can make a
  later model request unencodable.
"""

from __future__ import annotations

import json

import grpc
import pytest
from sessions_helpers import append, assistant, call, new_session, result

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import session_service_pb2 as pb

USAGE = cpb.Usage(input_tokens=120, output_tokens=7, requests=1)


async def test_a_repeated_response_id_in_two_turns_keeps_both_bills(env):
    await new_session(env.stub, "s")
    # Turn 1 and turn 2 of one run, both answered by a server that always says "chatcmpl-1".
    await append(
        env.stub, "s", call("c1", run_id="run_a", turn=1, response_id="chatcmpl-1", usage=USAGE), result("c1")
    )
    second = await append(
        env.stub, "s", assistant("done", run_id="run_a", turn=2, response_id="chatcmpl-1", usage=USAGE)
    )
    assert second[0].usage == USAGE
    # Another run on the same session, same server, same id: its own response too.
    await append(
        env.stub, "s", assistant("again", run_id="run_b", turn=1, response_id="chatcmpl-1", usage=USAGE)
    )
    listed = (
        await env.stub.ListEntries(pb.ListEntriesRequest(session=pb.SessionRef(session_id="s")))
    ).entries
    assert sum(e.usage.input_tokens for e in listed) == 3 * USAGE.input_tokens


async def test_the_same_response_billed_twice_is_still_refused(env):
    await new_session(env.stub, "s")
    await append(env.stub, "s", assistant("a", run_id="run_a", turn=3, response_id="resp_9", usage=USAGE))
    with pytest.raises(grpc.aio.AioRpcError) as info:  # a save point written again
        await append(env.stub, "s", assistant("a", run_id="run_a", turn=3, response_id="resp_9", usage=USAGE))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "USAGE_ALREADY_RECORDED"
    meta = details_of(info.value)[1]
    assert (meta["response_id"], meta["run_id"], meta["turn"]) == ("resp_9", "run_a", "3")
    with pytest.raises(grpc.aio.AioRpcError) as info:  # two entries of one response in a batch
        await append(
            env.stub,
            "s",
            assistant("x", run_id="run_a", turn=4, response_id="resp_10", usage=USAGE),
            assistant("y", run_id="run_a", turn=4, response_id="resp_10", usage=USAGE),
        )
    assert reason_of(info.value) == "INVALID_ENTRY"


async def test_escaped_lone_surrogates_are_normalized_on_the_way_in(env):
    await new_session(env.stub, "s")
    arguments = '{"path": "a.txt",  "content": "x\\ud99cy \\ud83d\\ude00 \\\\ud800"}'
    entry = call("c1", name="write_file", arguments=arguments)
    entry.display.extra_json = '{"note": "\\udc00"}'
    stored = (await append(env.stub, "s", entry, result("c1", content="ok")))[0]
    # Only the lone escape changed: the pair, the escaped backslash and the spacing are kept.
    want = '{"path": "a.txt",  "content": "x\\ufffdy \\ud83d\\ude00 \\\\ud800"}'
    assert stored.item.tool_call.arguments == want
    assert json.loads(stored.display.extra_json) == {"note": "\ufffd"}
    ctx = await env.stub.GetContext(pb.GetContextRequest(session=pb.SessionRef(session_id="s")))
    assert ctx.entries[0].item.tool_call.arguments == want
    # Clean arguments are kept byte for byte.
    clean = '{ "cmd" : "echo \\u00e9" }'
    kept = (await append(env.stub, "s", call("c2", arguments=clean), result("c2")))[0]
    assert kept.item.tool_call.arguments == clean
