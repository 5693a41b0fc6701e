"""exec_command's command policy in the tool service (004 §2.7j): the request's and the service's own."""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tools_helpers import ToolsEnv, make_config

from agentrt.mesh.status import details_of, reason_of
from agentrt.tools.config import ToolsConfig
from agentrt.tools.server import build_server
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc


def details(result: common_pb2.ToolResult) -> dict:
    return json.loads(result.details_json or "{}")


async def sh(tools: ToolsEnv, cmd: str, allow=(), deny=(), call_id: str = "", **kw) -> pb.ExecuteToolResponse:
    req = tools.request("exec_command", {"cmd": cmd}, call_id=call_id or f"call_{os.urandom(6).hex()}", **kw)
    req.command_policy.allow.extend(allow)
    req.command_policy.deny.extend(deny)
    return await tools.stub.ExecuteTool(req)


#: A pattern with exponential backtracking, and a command on which it never finishes unaided.
CATASTROPHIC = r"(a|a)+$"
CATASTROPHIC_CMD = "echo " + "a" * 64 + "b > made.txt"


@pytest.fixture
def ws(tools):
    # not created here: the service creates a workspace that does not exist yet (and owns it)
    return tools.workspace


async def test_allow_list(tools, ws):
    ok = (await sh(tools, "echo hi > made.txt", allow=[r"^echo\b", r"^ls\b"])).result
    assert not ok.is_error and (ws / "made.txt").exists()
    refused = (await sh(tools, "touch nope.txt", allow=[r"^echo\b", r"^ls\b"])).result
    assert refused.is_error and refused.status == common_pb2.TOOL_RESULT_STATUS_DENIED
    assert "allow rules" in refused.content and r'"^echo\b"' in refused.content
    assert details(refused)["reason"] == "POLICY_DENIED" and details(refused)["rule"] == "allow"
    assert not (ws / "nope.txt").exists()


async def test_deny_list_names_the_rule(tools, ws):
    refused = (await sh(tools, "rm -rf data && touch gone.txt", deny=[r"curl", r"rm\s+-rf"])).result
    assert refused.is_error and refused.status == common_pb2.TOOL_RESULT_STATUS_DENIED
    assert r'"rm\s+-rf"' in refused.content and "deny rule" in refused.content
    d = details(refused)
    assert (d["rule"], d["pattern"], d["pattern_index"], d["policy"]) == ("deny", r"rm\s+-rf", 1, "agent")
    assert refused.exit_code == 0 and not (ws / "gone.txt").exists()
    ok = (await sh(tools, "touch fine.txt", deny=[r"curl", r"rm\s+-rf"])).result
    assert not ok.is_error and (ws / "fine.txt").exists()


async def test_deny_wins_over_allow(tools, ws):
    allow, deny = [r"^echo "], [r"secret"]
    assert not (await sh(tools, "echo hello", allow=allow, deny=deny)).result.is_error
    both = (await sh(tools, "echo secret > leak.txt", allow=allow, deny=deny)).result
    assert both.status == common_pb2.TOOL_RESULT_STATUS_DENIED and details(both)["rule"] == "deny"
    assert not (ws / "leak.txt").exists()
    neither = (await sh(tools, "cat secret", allow=allow, deny=deny)).result
    assert details(neither)["rule"] == "allow"


async def test_refusal_is_journaled_like_any_result(tools, ws):
    first = await sh(tools, "touch x.txt", deny=["touch"], call_id="call_pol")
    again = await sh(tools, "touch x.txt", deny=["touch"], call_id="call_pol")
    assert not first.replayed and again.replayed
    assert again.result.content == first.result.content
    assert again.result.status == common_pb2.TOOL_RESULT_STATUS_DENIED
    record = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="call_pol"))
    assert record.state == pb.EXECUTION_STATE_FINISHED
    assert record.result.status == common_pb2.TOOL_RESULT_STATUS_DENIED


async def test_uncompilable_request_pattern_is_invalid_argument_and_records_nothing(tools, ws):
    for allow, deny, field in (
        ([r"(unclosed"], [], "command_policy.allow"),
        ([], ["ok", "[z-a]"], "command_policy.deny"),
    ):
        with pytest.raises(grpc.RpcError) as info:
            await sh(tools, "touch bad.txt", allow=allow, deny=deny, call_id="call_bad")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(info.value) == "INVALID_VALUE"
        assert field in info.value.details()
    record = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="call_bad"))
    assert record.state == pb.EXECUTION_STATE_ABSENT
    assert not (ws / "bad.txt").exists()
    # the same call id with a usable policy runs: nothing was recorded under it
    ok = await sh(tools, "touch bad.txt", deny=["curl"], call_id="call_bad")
    assert not ok.result.is_error and (ws / "bad.txt").exists()


async def test_streamed_calls_are_refused_the_same_way(tools, ws):
    req = tools.request("exec_command", {"cmd": "touch s.txt"}, call_id="call_stream")
    req.command_policy.deny.append("touch")
    messages = [m async for m in tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req))]
    assert [m.WhichOneof("event") for m in messages] == ["result"]
    assert messages[0].result.result.status == common_pb2.TOOL_RESULT_STATUS_DENIED
    assert not (ws / "s.txt").exists()


async def test_undecodable_arguments_are_error_results(tools, ws):
    for args in (
        {"cmd": "touch a", "workdir": True},
        {"cmd": 5},
        {"cmd": ""},
        "[1]",
        {"cmd": "x", "session_id": 3.5},
    ):
        resp = await tools.run("exec_command", args, call_id=f"call_{os.urandom(4).hex()}")
        assert resp.result.is_error and resp.result.status == common_pb2.TOOL_RESULT_STATUS_ERROR
        assert details(resp.result)["reason"] == "INVALID_ARGUMENTS", resp.result.content
    # the zero-value sentinels still decode (004 §2.7l)
    ok = await tools.run(
        "exec_command", {"cmd": "echo ok", "workdir": 0, "session_id": None}, call_id="call_s"
    )
    assert not ok.result.is_error and ok.result.content == "ok\n"


async def start(start_server, tmp_path, **overrides) -> ToolsEnv:
    config = make_config(tmp_path, **overrides)
    address = await start_server(build_server(config))
    channel = grpc.aio.insecure_channel(address)
    ws = tmp_path / "ws"
    return ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, ws)


async def test_service_policy_and_request_policy_both_apply(start_server, tmp_path):
    tools = await start(
        start_server, tmp_path, policy_deny=(r"\bsudo\b",), policy_allow=(r"^(echo|touch|sudo) ",)
    )
    try:
        svc = (await sh(tools, "sudo touch a.txt")).result
        assert svc.status == common_pb2.TOOL_RESULT_STATUS_DENIED
        assert "tool service's command policy" in svc.content and details(svc)["policy"] == "service"
        not_allowed = (await sh(tools, "ls")).result
        assert details(not_allowed)["rule"] == "allow" and details(not_allowed)["policy"] == "service"
        agent = (await sh(tools, "touch b.txt", deny=["touch"])).result
        assert "agent's command policy" in agent.content and details(agent)["policy"] == "agent"
        ok = (await sh(tools, "touch c.txt", deny=["rm"])).result
        assert not ok.is_error
        assert sorted(os.listdir(tools.workspace)) == ["c.txt"]
    finally:
        await tools.channel.close()


async def test_broken_service_policy_refuses_every_command(start_server, tmp_path, capfd):
    tools = await start(start_server, tmp_path, policy_deny=("rm", "(?P<oops"))
    try:
        assert "REFUSE EVERY COMMAND" in capfd.readouterr().err
        refused = (await sh(tools, "echo hi")).result
        assert refused.status == common_pb2.TOOL_RESULT_STATUS_DENIED
        assert "(?P<oops" in refused.content and "does not compile" in refused.content
        assert details(refused)["rule"] == "invalid"
        # the file tools do not run commands and are unaffected
        wrote = await tools.run("write_file", {"path": "f.txt", "content": "x"}, call_id="call_w")
        assert not wrote.result.is_error
    finally:
        await tools.channel.close()


def test_policy_environment_variables(monkeypatch):
    monkeypatch.setenv("AGENTRT_TOOLS_POLICY_ALLOW", '["^git ", "^ls"]')
    monkeypatch.setenv("AGENTRT_TOOLS_POLICY_DENY", '["push --force"]')
    monkeypatch.setenv("AGENTRT_TOOLS_MAX_ARCHIVE_BYTES", "1048576")
    config = ToolsConfig.from_env(port=0)
    assert config.policy_allow == ("^git ", "^ls") and config.policy_deny == ("push --force",)
    assert config.max_archive_bytes == 1048576
    for bad in ('"^git"', "[1]", "not json"):
        monkeypatch.setenv("AGENTRT_TOOLS_POLICY_DENY", bad)
        with pytest.raises(ValueError, match="AGENTRT_TOOLS_POLICY_DENY"):
            ToolsConfig.from_env(port=0)


async def test_a_catastrophic_pattern_is_refused_while_the_server_keeps_answering(tools, ws):
    wrote = await tools.run("write_file", {"path": "notes.txt", "content": "kept"}, call_id="call_w")
    assert not wrote.result.is_error
    health = health_pb2_grpc.HealthStub(tools.channel)
    # all three in flight at once: without the check's time budget the first never returns
    # and the event loop it holds never answers the other two
    slow, checked, read = await asyncio.gather(
        sh(tools, CATASTROPHIC_CMD, deny=[r"curl", CATASTROPHIC], call_id="call_redos"),
        health.Check(health_pb2.HealthCheckRequest(service="agentrt.v1.ToolService")),
        tools.run("read_file", {"path": "notes.txt"}, call_id="call_r"),
    )
    assert checked.status == health_pb2.HealthCheckResponse.SERVING
    assert not read.result.is_error and "kept" in read.result.content
    refused = slow.result
    assert refused.is_error and refused.status == common_pb2.TOOL_RESULT_STATUS_DENIED
    assert f'deny pattern "{CATASTROPHIC}" took too long to evaluate' in refused.content
    assert "agent's command policy" in refused.content
    d = details(refused)
    assert (d["reason"], d["rule"], d["pattern"], d["pattern_index"], d["pattern_list"], d["policy"]) == (
        "POLICY_DENIED",
        "timeout",
        CATASTROPHIC,
        1,
        "deny",
        "agent",
    )
    assert not (ws / "made.txt").exists()
    # the refusal is the call's journaled answer, like any other
    again = await sh(tools, CATASTROPHIC_CMD, deny=[r"curl", CATASTROPHIC], call_id="call_redos")
    assert again.replayed and again.result.content == refused.content
    # the same policy still judges ordinary commands as before
    assert details((await sh(tools, "curl x", deny=[r"curl", CATASTROPHIC])).result)["rule"] == "deny"
    ok = (await sh(tools, "echo fine > fine.txt", deny=[r"curl", CATASTROPHIC])).result
    assert not ok.is_error and (ws / "fine.txt").exists()


async def test_a_catastrophic_service_pattern_is_refused_too(start_server, tmp_path):
    tools = await start(start_server, tmp_path, policy_deny=(CATASTROPHIC,))
    try:
        refused = (await sh(tools, CATASTROPHIC_CMD)).result
        assert refused.status == common_pb2.TOOL_RESULT_STATUS_DENIED
        assert "tool service's command policy" in refused.content
        assert (details(refused)["rule"], details(refused)["policy"]) == ("timeout", "service")
        assert not (await sh(tools, "echo ok")).result.is_error
    finally:
        await tools.channel.close()


async def test_policy_limits_are_invalid_argument_naming_the_limit(tools, ws):
    with pytest.raises(grpc.RpcError) as info:
        await sh(tools, "ls", deny=["rm"] * 257, call_id="call_many")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason_of(info.value) == "INVALID_VALUE"
    assert "command_policy.deny: 257 patterns, more than the limit of 256" in info.value.details()
    assert "does not compile" not in info.value.details()
    assert details_of(info.value)[1]["field"] == "command_policy.deny"
    for allow, needle in (([r"[[:alpha:]]"], "POSIX class"), ([r"(unclosed"], "does not compile")):
        with pytest.raises(grpc.RpcError) as info:
            await sh(tools, "ls", allow=allow, call_id="call_many")
        assert reason_of(info.value) == "INVALID_VALUE" and needle in info.value.details()
        assert "command_policy.allow[0]" in info.value.details()
    record = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="call_many"))
    assert record.state == pb.EXECUTION_STATE_ABSENT
