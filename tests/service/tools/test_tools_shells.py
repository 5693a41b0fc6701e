"""Persistent named shells (004 §2.7k, §2.7l) through the real service, and the pool with real
isolated shells: state survives, failures end a session cleanly, nothing outlives a shell.

Every shell runs under bubblewrap as in production; when isolation is unavailable the
service refuses commands and these tests fail, they never skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket

import grpc
import pytest
from tools_helpers import ToolsEnv, make_config, make_workspace, pids_with, until

from agentrt.tools.config import CommandLimits
from agentrt.tools.files.paths import open_workspace
from agentrt.tools.server import build_server
from agentrt.tools.shell.pool import OpenFailed, PoolClosed, ShellPool
from agentrt.tools.shell.session import ShellCommand
from agentrt.tools.shell.terminal import local_binaries, open_local
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

OK = common_pb2.TOOL_RESULT_STATUS_OK
ERROR = common_pb2.TOOL_RESULT_STATUS_ERROR
TIMED_OUT = common_pb2.TOOL_RESULT_STATUS_TIMED_OUT
INTERRUPTED = common_pb2.TOOL_RESULT_STATUS_INTERRUPTED


def _marker() -> str:
    return f"agentrt-shell-{os.urandom(6).hex()}"


def _grandchild(marker: str) -> str:
    """Shell text leaving a setsid'd grandchild named marker running."""
    return f"setsid bash -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 &"


async def sh(tools: ToolsEnv, cmd: str, session: object = "main", **kw) -> common_pb2.ToolResult:
    args: dict = {"cmd": cmd, "session_id": session}
    if "timeout_ms" in kw:
        args["timeout_ms"] = kw.pop("timeout_ms")
    if "workdir" in kw:
        args["workdir"] = kw.pop("workdir")
    kw.setdefault("call_id", f"call_{os.urandom(6).hex()}")
    return (await tools.run("exec_command", args, **kw)).result


def details(result: common_pb2.ToolResult) -> dict:
    return json.loads(result.details_json) if result.details_json else {}


@pytest.fixture
async def tools_with(start_server, tmp_path):
    """Start the tool service with config overrides: `env = await tools_with(max_shells=1)`."""
    channels: list[grpc.aio.Channel] = []

    async def start(**overrides) -> ToolsEnv:
        config = make_config(tmp_path, **overrides)
        address = await start_server(build_server(config))
        channel = grpc.aio.insecure_channel(address)
        channels.append(channel)
        return ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws")

    yield start
    for channel in channels:
        await channel.close()


# -- state survives ---------------------------------------------------------------------------


async def test_cd_and_export_persist_between_calls(tools):
    (make_workspace(tools.workspace) / "sub").mkdir(parents=True)
    first = await sh(tools, "cd sub && export GREETING=hello && f() { echo fn; }")
    assert first.status == OK, first.content
    assert details(first)["shell"] == "new" and details(first)["session_id"] == "main"
    second = await sh(tools, 'pwd; echo "$GREETING"; f')
    assert second.content == f"{tools.workspace}/sub\nhello\nfn\n"
    assert details(second)["shell"] == "reused"


async def test_two_names_are_independent(tools):
    await sh(tools, "export WHO=alpha; cd /tmp", session="a")
    await sh(tools, "export WHO=beta", session="b")
    a = await sh(tools, 'echo "$WHO $PWD"', session="a")
    b = await sh(tools, 'echo "$WHO $PWD"', session="b")
    assert a.content == "alpha /tmp\n"
    assert b.content == f"beta {tools.workspace}\n"


async def test_workdir_changes_the_shells_directory_for_good(tools):
    (make_workspace(tools.workspace) / "w" / "deeper").mkdir(parents=True)
    r = await sh(tools, "cd deeper && pwd", workdir="w")
    assert r.content == f"{tools.workspace}/w/deeper\n"
    assert (await sh(tools, "pwd")).content == f"{tools.workspace}/w/deeper\n"
    outside = await sh(tools, "pwd", workdir="../..")
    assert outside.is_error and details(outside)["reason"] == "PATH_OUTSIDE_WORKSPACE"


async def test_a_command_travels_byte_for_byte(tools):
    tricky = "a'b\"c\\d !x $HOME `x` \t é ✓"
    r = await sh(tools, "cat <<'EOF'\n" + tricky + "\nEOF\nprintf '%s\\n' 'it''s'")
    assert r.status == OK, r.content
    assert r.content == tricky + "\nits\n"
    echo_back = await sh(tools, "echo 'echo hi'")  # output that repeats command text is kept
    assert echo_back.content == "echo hi\n"


# -- surviving what a model sends ------------------------------------------------------------


async def test_shell_survives_set_euo_pipefail(tools):
    await sh(tools, "export KEEP=still-here")
    assert (await sh(tools, "set -euo pipefail")).status == OK
    failed = await sh(tools, "echo before; false; echo never")
    assert failed.status == ERROR and failed.exit_code == 1
    assert failed.content == "before\n[exit status 1]"
    in_function = await sh(tools, "g() { false; echo never; }; g; echo never2")
    assert in_function.exit_code == 1 and "never" not in in_function.content
    piped = await sh(tools, "false | true")
    assert piped.exit_code == 1
    alive = await sh(tools, 'echo "$KEEP $-"')
    assert alive.status == OK
    assert alive.content.startswith("still-here ") and "e" in alive.content.split()[1]
    unbound = await sh(tools, "set +e; echo $NOT_SET_ANYWHERE; echo never")
    assert unbound.is_error and "unbound variable" in unbound.content and "never" not in unbound.content
    assert (await sh(tools, 'echo "$KEEP"')).content == "still-here\n"


async def test_exit_in_a_subshell_is_just_a_status(tools):
    await sh(tools, "export KEEP=1")
    r = await sh(tools, "( exit 3 )")
    assert r.exit_code == 3 and r.status == ERROR and "[exit status 3]" in r.content
    assert details(r)["exit_code"] == 3
    assert (await sh(tools, "echo $KEEP")).content == "1\n"


async def test_syntax_errors_and_unbalanced_quotes_do_not_hang_the_shell(tools):
    await sh(tools, "export KEEP=1")
    assert (await sh(tools, "if then")).exit_code == 2
    assert (await sh(tools, 'echo "unbalanced')).exit_code == 2
    assert (await sh(tools, "cat <<'EOF'\nx\nEOF")).content == "x\n"
    assert (await sh(tools, "cat; read line; echo $?")).content == "1\n"  # stdin is /dev/null
    assert (await sh(tools, "echo $KEEP")).content == "1\n"


async def test_commands_printing_the_sentinel_halves_do_not_end_early(tools):
    await sh(tools, "export KEEP=1")
    # PROMPT_COMMAND names both halves, apart; print them every way but joined
    whole = await sh(tools, 'echo "$PROMPT_COMMAND"; sleep 0.05; echo tail')
    assert whole.status == OK and whole.content.endswith("tail\n")
    halves = re.findall(r"\b[0-9a-f]{16}\b", whole.content)
    assert len(halves) == 2
    h1, h2 = halves
    for text in (h1, h2, f"{h1} {h2}", f"{h1}\\n{h2}", f"{h2}{h1}"):
        r = await sh(tools, f"printf '%b\\n' '{text}'; sleep 0.02; echo after")
        assert r.status == OK, r.content
        assert r.content == text.replace("\\n", "\n") + "\nafter\n"
    assert (await sh(tools, "echo $KEEP")).content == "1\n"


async def test_exit_ends_the_session_and_the_next_call_is_fresh(tools):
    marker = _marker()
    await sh(tools, f"export KEEP=1; {_grandchild(marker)}")
    await until(lambda: pids_with(marker), "the grandchild to start")
    r = await sh(tools, "echo bye; exit 4")
    assert r.is_error and r.status == ERROR
    assert r.content.startswith("bye\n") and "the shell exited" in r.content
    assert details(r)["exit_code"] is None and details(r)["reason"] == "SHELL_FAILED"
    assert pids_with(marker) == []  # the session took everything with it
    fresh = await sh(tools, "echo [$KEEP]")
    assert fresh.content == "[]\n" and details(fresh)["shell"] == "new"


# -- endings -----------------------------------------------------------------------------------


async def test_timeout_closes_the_shell_and_the_next_call_is_fresh(tools):
    marker = _marker()
    await sh(tools, "export KEEP=1")
    r = await sh(tools, f"{_grandchild(marker)} echo started; sleep 30", timeout_ms=500)
    assert r.status == TIMED_OUT and r.is_error
    assert "started\n" in r.content and "timed out" in r.content  # after bash's "[1] PID" job line
    assert details(r)["timed_out"] is True and details(r)["exit_code"] is None
    assert pids_with(marker) == []  # gone by the time the result is out
    fresh = await sh(tools, "echo [$KEEP]")
    assert fresh.content == "[]\n" and details(fresh)["shell"] == "new"


async def test_caller_deadline_and_cancel_close_the_shell(tools):
    await sh(tools, "export KEEP=1")
    marker = _marker()
    req = tools.request(
        "exec_command",
        {"cmd": f"bash -c 'exec -a {marker} sleep 300'", "session_id": "main"},
        call_id="c_deadline",
        timeout=60,
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.ExecuteTool(req, timeout=1.0)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await until(lambda: not pids_with(marker), "the command to be killed")

    async def finished():
        got = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_deadline"))
        return got if got.state == pb.EXECUTION_STATE_FINISHED else None

    # The journal closes the record just after the kill; wait for it rather than race it.
    got = await until(finished, "the journal to close the call")
    assert got.result.status == INTERRUPTED
    assert json.loads(got.result.details_json)["reason"] == "CALLER_DEADLINE"
    assert (await sh(tools, "echo [$KEEP]; export KEEP=2")).content == "[]\n"

    marker = _marker()
    call = tools.stub.ExecuteTool(
        tools.request("exec_command", {"cmd": f"bash -c 'exec -a {marker} sleep 300'", "session_id": "main"})
    )
    await until(lambda: pids_with(marker), "the command to start")
    # the caller going away is not an ending; an explicit cancel is (CancelExecution)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert pids_with(marker)
    await tools.stub.CancelExecution(pb.CancelExecutionRequest(run_id="run_1", call_id="call_1"))
    await until(lambda: not pids_with(marker), "the command to be killed")
    assert (await sh(tools, "echo [$KEEP]")).content == "[]\n"


async def test_output_is_capped_and_the_shell_goes_on(tools):
    r = await sh(tools, "seq 1 200000; echo last-line", max_output_bytes=1000)
    assert r.status == OK and r.output_truncated
    assert r.content.startswith("1\n2\n") and r.content.endswith("last-line\n")
    assert "bytes of output dropped" in r.content
    assert len(r.content.encode()) < 1200
    assert details(r)["output_bytes"] > 1_000_000
    assert (await sh(tools, "echo ok")).content == "ok\n"


async def test_progress_streams_output_but_never_the_sentinel(tools):
    req = tools.request("exec_command", {"cmd": "echo one; sleep 0.05; echo two", "session_id": "s"})
    chunks, result = [], None
    async for event in tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req)):
        if event.WhichOneof("event") == "progress":
            assert event.progress.stream == "stdout"  # the PTY merges both streams
            chunks.append(event.progress.text)
        else:
            result = event.result.result
    assert result is not None and result.content == "one\ntwo\n"
    assert "".join(chunks) == "one\ntwo\n"


async def test_stop_sandbox_closes_its_shells_and_preempts_a_running_command(tools):
    await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_sh"))
    marker = _marker()
    await sh(tools, f"export KEEP=1; {_grandchild(marker)}", sandbox_id="sbx_sh")
    busy = tools.request(
        "exec_command", {"cmd": "echo started; sleep 30", "session_id": "main"}, sandbox_id="sbx_sh"
    )
    stream = tools.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=busy))
    first = await stream.read()
    assert first.progress.text.startswith("started")  # the command is running in the shell
    await tools.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id="sbx_sh"))

    async def result_event():
        while (event := await stream.read()).WhichOneof("event") != "result":
            pass
        return event.result.result

    result = await asyncio.wait_for(result_event(), 10)  # far less than the command's 30 s
    assert result.is_error and result.status == ERROR
    assert "stopped" in result.content and details(result)["exit_code"] is None
    assert pids_with(marker) == []
    await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_sh"))
    fresh = await sh(tools, "echo [$KEEP]", sandbox_id="sbx_sh")
    assert fresh.content == "[]\n" and details(fresh)["shell"] == "new"


# -- isolation ---------------------------------------------------------------------------------


async def test_isolation_holds_inside_a_shell(tools):
    marker = _marker()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    outside = f"/tmp/{marker}"
    try:
        r = await sh(
            tools,
            "id -u; grep -c : /proc/net/dev; cat /etc/shadow >/dev/null 2>&1 && echo SHADOW; "
            f"echo x > {outside} && ls {outside}; touch /usr/{marker} 2>/dev/null && echo USR; "
            f"(echo {marker} > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED; echo end",
        )
        lines = r.content.split("\n")
        assert lines[0] != "0"  # not root
        assert lines[1] == "1"  # no interface but lo
        assert "SHADOW" not in r.content and "USR" not in r.content and "CONNECTED" not in r.content
        assert r.content.endswith("end\n")
        assert not os.path.exists(outside)  # its /tmp is private
        assert not os.path.exists(f"/usr/{marker}")
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


# -- schema and argument decoding --------------------------------------------------------------


async def test_schema_advertises_session_id_when_shells_are_on(tools):
    tools_list = (await tools.stub.ListTools(pb.ListToolsRequest())).tools
    spec = next(t for t in tools_list if t.name == "exec_command")
    assert "session_id" in json.loads(spec.parameters_json_schema)["properties"]


async def test_shells_off_hides_session_id_and_ignores_it(tools_with):
    tools = await tools_with(shells=False)
    tools_list = (await tools.stub.ListTools(pb.ListToolsRequest())).tools
    spec = next(t for t in tools_list if t.name == "exec_command")
    assert "session_id" not in json.loads(spec.parameters_json_schema)["properties"]
    await sh(tools, "export KEEP=1; cd /tmp")
    r = await sh(tools, 'echo "[$KEEP] $PWD"')
    assert r.content == f"[] {tools.workspace}\n"
    assert "session_id" not in details(r)
    bad = await sh(tools, "true", session=True)  # still decoded: refused
    assert bad.is_error and details(bad)["reason"] == "INVALID_ARGUMENTS"


@pytest.mark.parametrize("value", [True, 42, 3.14, {"a": 1}])
async def test_non_string_session_id_is_refused_as_a_result(tools, value):
    r = await sh(tools, "echo ran > ran.txt", session=value)
    assert r.is_error and r.status == ERROR
    assert "session_id" in r.content
    assert not (tools.workspace / "ran.txt").exists()


@pytest.mark.parametrize("value", [None, 0, False])
async def test_zero_value_session_id_runs_one_shot(tools, value):
    await sh(tools, "export KEEP=1", session=value)
    r = await sh(tools, "echo [$KEEP]", session=value)
    assert r.status == OK and r.content == "[]\n"
    assert "session_id" not in details(r)


async def test_a_session_named_zero_is_a_session(tools):
    await sh(tools, "export KEEP=zero", session="0")
    assert (await sh(tools, "echo $KEEP", session="0")).content == "zero\n"


async def test_a_full_pool_refuses_politely(tools_with):
    tools = await tools_with(max_shells=1)
    assert (await sh(tools, "true", session="one")).status == OK
    r = await sh(tools, "echo ran > ran.txt", session="two")
    assert r.is_error and details(r)["reason"] == "SHELLS_EXHAUSTED"
    assert not (tools.workspace / "ran.txt").exists()
    assert (await sh(tools, "echo again", session="one")).content == "again\n"
    assert (await sh(tools, "echo one-shot", session=None)).content == "one-shot\n"


async def test_a_repeated_session_call_is_answered_from_the_journal(tools):
    first = await sh(tools, "echo x >> count.txt; wc -l < count.txt", call_id="c_once")
    again = await tools.run(
        "exec_command",
        {"cmd": "echo x >> count.txt; wc -l < count.txt", "session_id": "main"},
        call_id="c_once",
    )
    assert again.replayed and again.result.content == first.content == "1\n"
    assert (tools.workspace / "count.txt").read_text() == "x\n"


# -- the pool with real shells -----------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path):
    return open_workspace(str(tmp_path / "pool-ws"), make_parents=True, sandbox_uid=65534, sandbox_gid=65534)


def _opener(workspace, opened: list):
    bins = local_binaries("bwrap")

    async def opener():
        terminal = await open_local(bins, "bwrap", workspace, {}, CommandLimits())
        opened.append(terminal)
        return terminal

    return opener


def _cmd(text: str, timeout: float = 20.0) -> ShellCommand:
    return ShellCommand(text, "", timeout, 4096)


async def test_racing_a_new_name_opens_two_and_keeps_one(workspace):
    pool = ShellPool(max_shells=4, idle_seconds=600, max_progress_bytes=1 << 20)
    opened: list = []
    opener = _opener(workspace, opened)
    try:
        a, b = await asyncio.gather(
            pool.run(("t", "w", "x"), opener, _cmd("export N=1"), emit=None, deadline=None),
            pool.run(("t", "w", "x"), opener, _cmd("export N=1"), emit=None, deadline=None),
        )
        assert len(opened) == 2 and len(pool) == 1
        assert sorted([a.fresh, b.fresh]) == [False, True]
        assert sum(t.exit_status is not None for t in opened) == 1  # the loser closed its own
        r = await pool.run(("t", "w", "x"), opener, _cmd("echo $N"), emit=None, deadline=None)
        assert r.output == "1\n" and not r.fresh
    finally:
        await pool.close()


async def test_closing_the_pool_preempts_a_running_command_and_is_final(workspace):
    pool = ShellPool(max_shells=4, idle_seconds=600, max_progress_bytes=1 << 20)
    marker = _marker()
    started = asyncio.Event()
    opener = _opener(workspace, [])
    running = asyncio.create_task(
        pool.run(
            ("t", "w", "x"),
            opener,
            _cmd(f"{_grandchild(marker)} echo started; sleep 30", timeout=60),
            emit=lambda _s, text: "started" in text and started.set(),
            deadline=None,
        )
    )
    await asyncio.wait_for(started.wait(), 10)
    await pool.close()
    result = await asyncio.wait_for(running, 10)  # far less than the command's 30 s
    assert result.exit_code is None and "shutting down" in result.error
    assert "started\n" in result.output
    assert pids_with(marker) == []
    with pytest.raises(PoolClosed):
        await pool.run(("t", "w", "y"), opener, _cmd("true"), emit=None, deadline=None)


async def test_idle_shells_are_closed(workspace):
    pool = ShellPool(max_shells=4, idle_seconds=0.2, max_progress_bytes=1 << 20)
    opened: list = []
    opener = _opener(workspace, opened)
    try:
        await pool.run(("t", "w", "x"), opener, _cmd("export N=1"), emit=None, deadline=None)
        await until(lambda: len(pool) == 0 and opened[0].exit_status is not None, "the idle shell to close")
        r = await pool.run(("t", "w", "x"), opener, _cmd("echo [$N]"), emit=None, deadline=None)
        assert r.output == "[]\n" and r.fresh
    finally:
        await pool.close()


async def test_commands_on_one_shell_run_one_at_a_time(workspace):
    pool = ShellPool(max_shells=4, idle_seconds=600, max_progress_bytes=1 << 20)
    opener = _opener(workspace, [])
    try:
        await pool.run(("t", "w", "x"), opener, _cmd("n=0"), emit=None, deadline=None)
        step = "v=$n; sleep 0.02; n=$((v+1)); echo $n"
        results = await asyncio.gather(
            *(pool.run(("t", "w", "x"), opener, _cmd(step), emit=None, deadline=None) for _ in range(5))
        )
        assert sorted(r.output for r in results) == [f"{i}\n" for i in range(1, 6)]
    finally:
        await pool.close()


async def test_a_shell_opening_while_its_sandbox_stops_is_not_kept(workspace):
    pool = ShellPool(max_shells=4, idle_seconds=600, max_progress_bytes=1 << 20)
    opened: list = []
    plain = _opener(workspace, opened)
    gate, launched = asyncio.Event(), asyncio.Event()

    async def slow_opener():
        terminal = await plain()
        launched.set()
        await gate.wait()
        return terminal

    key = ("t", "sandbox:t/sbx", "x")
    try:
        running = asyncio.create_task(pool.run(key, slow_opener, _cmd("true"), emit=None, deadline=None))
        await asyncio.wait_for(launched.wait(), 10)
        await pool.close_scope("sandbox:t/sbx", "the sandbox was stopped")
        gate.set()
        with pytest.raises(OpenFailed, match="stopped"):
            await running
        assert len(pool) == 0 and opened[0].exit_status is not None
        r = await pool.run(key, plain, _cmd("echo ok"), emit=None, deadline=None)  # resumed: a new one
        assert r.output == "ok\n" and r.fresh
    finally:
        await pool.close()


async def test_process_count_is_limited_in_a_shell_across_its_commands(tools):
    """Background jobs outlive a session command; RLIMIT_NPROC (512) still bounds them all."""
    from tools_helpers import spawner

    limit = tools.config.limits.processes
    await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_procs"))
    tag = _marker()
    first = await sh(tools, spawner(tag, 300, False), session="procs", sandbox_id="sbx_procs")
    second = await sh(tools, spawner(tag, 300, False), session="procs", sandbox_id="sbx_procs")
    counts = [tuple(int(p.split("=")[1]) for p in r.content.split()[:2]) for r in (first, second)]
    forked = sum(ok for ok, _ in counts)
    assert counts[0] == (300, 0) and counts[1][1] > 0 and forked + counts[1][1] == 600, counts
    children = f"{tag}-child"  # a child shows this name once it has exec'd sleep
    seen = await until(lambda: len(pids_with(children)) >= forked and pids_with(children), "the children")
    assert len(seen) == forked <= limit
    await tools.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id="sbx_procs"))
    await until(lambda: not pids_with(children), "the shell's processes to end")


async def test_each_tenant_has_its_own_shell_cap(tools_with):
    tools = await tools_with(max_shells=8, max_shells_per_tenant=2)

    async def named(who: str, session: str, ws: str) -> common_pb2.ToolResult:
        req = tools.request(
            "exec_command",
            {"cmd": "echo ran > ran.txt; echo ok", "session_id": session},
            workspace=str(tools.tmp / ws),
            call_id=f"call_{os.urandom(6).hex()}",
        )
        return (await tools.stub.ExecuteTool(req, metadata=(("x-agentrt-tenant", who),))).result

    assert (await named("alice", "one", "a1")).content == "ok\n"
    assert (await named("alice", "two", "a2")).content == "ok\n"
    full = await named("alice", "three", "a3")
    assert full.is_error and details(full)["reason"] == "SHELLS_EXHAUSTED"
    assert details(full)["limit"] == "tenant"
    assert "tenant" in full.content and not (tools.tmp / "a3" / "ran.txt").exists()
    assert (await named("bob", "one", "b1")).content == "ok\n"  # another tenant is not held up
    assert (await named("alice", "one", "a1")).content == "ok\n"  # alice's open shells keep working
