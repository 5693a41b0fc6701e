"""One behavior suite, run against the local (bubblewrap) and the docker backend.

Every test creates a sandbox of its backend through the real ToolService and checks from the
host side, with a random marker per test: no network reaches a host listener, nothing is
written outside the workspace, no host secret or environment is visible, no process outlives
its command (a setsid'd grandchild included), and the endings (timeout, caller deadline, explicit
cancel) answer differently (004 §2.7m). The docker half needs a running engine and the image of
scripts/docker-sandbox-image.sh: without them these tests skip locally and FAIL under CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess

import grpc
import pytest
from backend_helpers import docker_api, grandchild, marker_of, open_box, split, until
from tools_helpers import HostListener, pids_with

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

TIMED_OUT = common_pb2.TOOL_RESULT_STATUS_TIMED_OUT
INTERRUPTED = common_pb2.TOOL_RESULT_STATUS_INTERRUPTED


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.slow)])
async def box(request, start_server, tmp_path):
    async with open_box(start_server, tmp_path, request.param) as b:
        yield b


# -- network ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "kind", "host", "dev"),
    [
        (socket.AF_INET, socket.SOCK_STREAM, "127.0.0.1", "tcp"),
        (socket.AF_INET6, socket.SOCK_STREAM, "::1", "tcp"),
        (socket.AF_INET, socket.SOCK_DGRAM, "127.0.0.1", "udp"),
        (socket.AF_INET6, socket.SOCK_DGRAM, "::1", "udp"),
    ],
)
async def test_no_network_reaches_a_host_listener(box, family, kind, host, dev):
    marker = marker_of()
    listener = HostListener(family, kind, host)
    try:
        send = f"echo {marker} > /dev/{dev}/{host}/{listener.port}"
        # control: the same text from the host arrives, so silence below means something
        await asyncio.to_thread(subprocess.run, ["bash", "-c", send], check=True)
        assert marker.encode() in listener.received()
        result = await box.sh(f"{send} && echo SENT; {send} && echo SENT; echo END")
        assert "END" in result.content
        if dev == "tcp":
            assert "SENT" not in result.content
        assert listener.received() == b""
    finally:
        listener.sock.close()


async def test_no_dns_no_udp_out_and_only_loopback(box):
    result = await box.sh(
        "{ (getent hosts example.com || nslookup example.com) >/dev/null && echo RESOLVED;"
        "echo x > /dev/udp/8.8.8.8/53 && echo UDP_SENT; echo x > /dev/tcp/1.1.1.1/53 && echo TCP_SENT;"
        "} 2>/dev/null; echo ==; cat /proc/net/dev; echo =="
    )
    for leak in ("RESOLVED", "UDP_SENT", "TCP_SENT"):
        assert leak not in result.content
    table = result.content.split("==\n")[1]
    interfaces = [line.split(":")[0].strip() for line in table.splitlines() if ":" in line]
    assert interfaces == ["lo"]


# -- filesystem and secrets ---------------------------------------------------------------


async def test_writes_outside_the_workspace_leave_nothing_on_the_host(box):
    marker = marker_of()
    tmp = box.env.tmp
    outside = tmp / "outside"
    outside.mkdir()
    os.chmod(tmp, 0o755)
    os.symlink(outside, os.path.join(box.workspace, "planted"))  # planted from the host side
    targets = [f"/tmp/{marker}", f"/{marker}", f"/usr/{marker}", f"/etc/{marker}", f"{outside}/{marker}",
               f"{tmp}/{marker}", f"/var/tmp/{marker}", f"/dev/shm/{marker}", f"/root/{marker}"]  # fmt: skip
    script = "; ".join(f"echo {marker} > {t}" for t in targets)
    script += (
        f"; echo {marker} > planted/{marker}; ln -s {outside} escape; echo {marker} > escape/{marker}; "
        f"mkdir -p ../{marker}; echo {marker} > ../{marker}/f; echo END"
    )
    result = await box.sh(script)
    assert "END" in result.content
    for target in targets:
        assert not os.path.exists(target), target
    assert list(outside.iterdir()) == []
    assert not os.path.exists(os.path.join(os.path.dirname(box.workspace), marker))
    for dirpath, dirnames, filenames in os.walk(tmp):
        if dirpath.startswith(box.workspace):
            continue
        assert marker not in " ".join(filenames + dirnames), dirpath


async def test_host_shadow_and_environment_canary_are_invisible(box, monkeypatch):
    marker = marker_of()
    monkeypatch.setenv("AGENTRT_CANARY", marker)  # the service runs in this process
    result = await box.sh("cat /etc/shadow; env; cat /proc/self/environ; cat /proc/1/environ; echo END")
    assert "END" in result.content
    assert marker not in result.content and "AGENTRT_CANARY" not in result.content
    with open("/etc/shadow") as f:
        for line in f:
            secret = line.split(":")[1] if ":" in line else ""
            if len(secret) > 2:
                assert secret not in result.content


async def test_env_reaches_commands(box):
    result = await box.sh('echo "$GREETING"')
    assert result.content == "hello\n"
    if box.backend == "docker":  # on the CONTAINER, so every exec and shell reads it (004 §2.7n)
        assert "GREETING=hello" in (await box.sh("tr '\\0' '\\n' < /proc/1/environ")).content


async def test_files_written_by_commands_are_read_by_the_file_tools(box):
    await box.sh("mkdir -p sub && echo made > sub/f.txt")
    read = await box.env.run("read_file", {"path": "sub/f.txt"}, sandbox_id=box.sandbox_id, call_id="rf")
    assert read.result.content.endswith("made\n")
    result = await box.env.run(
        "exec_command", {"cmd": "pwd", "workdir": "sub"}, sandbox_id=box.sandbox_id, call_id="wd"
    )
    assert result.result.content.strip().endswith("/sub")


# -- processes and the three endings ------------------------------------------------------


async def test_no_process_survives_exit(box):
    marker = marker_of()
    # the command ends only once it has seen its grandchild run (a double fork too)
    result = await box.sh(
        f"{grandchild(marker)} (setsid sleep 301 &); "
        f"until cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -q ': '{split(marker)}'$'; "
        "do sleep 0.02; done; echo RUNNING",
        timeout=30,
    )
    assert result.content == "RUNNING\n"
    assert pids_with(marker) == []


async def test_timeout_kills_everything_and_says_timed_out(box):
    marker = marker_of()
    req = box.request(f"{grandchild(marker)} echo started; sleep 300", timeout=2.0)
    call = box.env.stub.ExecuteTool(req)
    await until(lambda: pids_with(marker), "the grandchild to run")
    result = (await call).result
    assert result.status == TIMED_OUT and result.is_error
    assert "started" in result.content  # output collected before the kill is kept
    assert pids_with(marker) == []  # gone by the time the result is out


async def test_caller_deadline_is_its_own_answer(box):
    marker = marker_of()
    req = box.request(f"{grandchild(marker)} sleep 300", call_id="c_deadline", timeout=60)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await box.env.stub.ExecuteTool(req, timeout=2.0)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    async def recorded():
        got = await box.env.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_deadline"))
        return got if got.state == pb.EXECUTION_STATE_FINISHED else None

    got = await until(recorded, "the journal to record the ending")
    assert got.result.status == INTERRUPTED
    assert json.loads(got.result.details_json)["reason"] == "CALLER_DEADLINE"
    await until(lambda: not pids_with(marker), "the command to be killed")


async def test_cancellation_is_its_own_answer(box):
    marker = marker_of()
    call = box.env.stub.ExecuteTool(box.request(f"{grandchild(marker)} sleep 300", call_id="c_cancel"))
    await until(lambda: pids_with(marker), "the command to start")
    # a caller that goes away leaves the command running; an explicit cancel ends it
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await call.code() == grpc.StatusCode.CANCELLED
    assert pids_with(marker)
    await box.env.stub.CancelExecution(pb.CancelExecutionRequest(run_id="run_1", call_id="c_cancel"))

    async def recorded():
        got = await box.env.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c_cancel"))
        return got if got.state == pb.EXECUTION_STATE_FINISHED else None

    got = await until(recorded, "the journal to record the ending")
    assert got.result.status == INTERRUPTED
    assert json.loads(got.result.details_json)["reason"] == "CALLER_CANCELLED"
    await until(lambda: not pids_with(marker), "the command to be killed")


async def test_output_is_streamed_and_capped_head_and_tail(box):
    req = box.request("seq 1 20000; echo oops >&2", max_output_bytes=1000)
    events = [e async for e in box.env.stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=req))]
    progress = [e.progress for e in events if e.WhichOneof("event") == "progress"]
    # stdout and stderr are two pipes: each arrives whole and in order, not ordered between them
    assert "".join(p.text for p in progress if p.stream == "stdout") == "".join(
        f"{i}\n" for i in range(1, 20001)
    )
    assert "".join(p.text for p in progress if p.stream == "stderr") == "oops\n"
    result = events[-1].result.result
    assert result.output_truncated and "bytes of output dropped" in result.content
    assert "1\n2\n3\n" in result.content[:100] and "20000\n" in result.content[-600:]


# -- lifecycle ----------------------------------------------------------------------------


async def test_adopt_same_fingerprint_replace_other_files_survive(box):
    await box.sh("echo kept > w.txt")
    if box.backend == "docker":
        await box.sh("echo inside > /root/c.txt")  # the container's own filesystem
    again = await box.create(env={"GREETING": "hello"})  # same settings: adopted
    assert again.state == pb.SANDBOX_STATE_RUNNING and again.workspace == box.workspace
    if box.backend == "docker":
        assert (await box.sh("cat /root/c.txt")).content == "inside\n"
    await box.create(env={"GREETING": "bye"})  # env changed: replaced (004 §2.7n)
    result = await box.sh('cat w.txt; echo "$GREETING"; cat /root/c.txt 2>/dev/null || echo NO_C')
    assert result.content == "kept\nbye\nNO_C\n"


async def test_stop_keeps_files_and_create_resumes(box):
    await box.sh("echo kept > s.txt")
    stopped = (await box.env.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.sandbox_id))).sandbox
    assert stopped.state == pb.SANDBOX_STATE_STOPPED
    got = (await box.env.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.sandbox_id))).sandbox
    assert got.state == pb.SANDBOX_STATE_STOPPED
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await box.sh("true")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(info.value) == "SANDBOX_STOPPED"
    assert open(os.path.join(box.workspace, "s.txt")).read() == "kept\n"
    await box.create(env={"GREETING": "hello"})
    assert (await box.sh("cat s.txt")).content == "kept\n"


async def test_stop_ends_a_running_command_as_stopped(box):
    marker = marker_of()
    call = box.env.stub.ExecuteTool(box.request(f"{grandchild(marker)} sleep 300", timeout=60))
    await until(lambda: pids_with(marker), "the command to start")
    await box.env.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.sandbox_id))
    result = (await call).result
    assert result.is_error and "stopped" in result.content
    await until(lambda: not pids_with(marker), "the command to be killed")


async def test_destroy_removes_the_sandbox(box):
    await box.env.stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id=box.sandbox_id))
    got = (await box.env.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.sandbox_id))).sandbox
    assert got.state == pb.SANDBOX_STATE_ABSENT
    assert not os.path.exists(box.workspace)
    if box.backend == "docker":
        names = [c["Names"][0] for c in await asyncio.to_thread(docker_api().containers, all=True)]
        assert f"/{box.container()}" not in names
