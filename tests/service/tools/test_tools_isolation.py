"""Isolation of exec_command, checked from the host side with a random marker per test.

These tests FAIL (never skip) when isolation is unavailable: the service then refuses
commands with FAILED_PRECONDITION/SANDBOX_UNAVAILABLE, which fails every call below.
Each network test first proves its listener works by reaching it from the host.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess

import pytest
from tools_helpers import HostListener


def _marker() -> str:
    return f"agentrt-{os.urandom(8).hex()}"


@pytest.mark.parametrize(
    ("family", "kind", "host", "dev"),
    [
        (socket.AF_INET, socket.SOCK_STREAM, "127.0.0.1", "tcp"),
        (socket.AF_INET6, socket.SOCK_STREAM, "::1", "tcp"),
        (socket.AF_INET, socket.SOCK_DGRAM, "127.0.0.1", "udp"),
    ],
)
async def test_no_network_reaches_a_host_listener(tools, family, kind, host, dev):
    marker = _marker()
    listener = HostListener(family, kind, host)
    try:
        send = f"echo {marker} > /dev/{dev}/{host}/{listener.port}"
        # control: the same text from the host does arrive, so silence below means something
        await asyncio.to_thread(subprocess.run, ["bash", "-c", send], check=True)
        assert marker.encode() in listener.received()
        result = await tools.sh(
            f"{send} && echo SENT; python3 -c 'import socket; "
            f'socket.create_connection(("{host}", {listener.port}), 2)\' && echo CONNECTED'
        )
        assert "SENT" not in result.content or dev == "udp"
        assert "CONNECTED" not in result.content
        assert listener.received() == b""
    finally:
        listener.close()


async def test_no_dns_and_no_interfaces_but_loopback(tools):
    result = await tools.sh(
        "getent hosts example.com || echo NO_DNS; cat /proc/net/dev; ls /sys/class/net 2>&1"
    )
    assert "NO_DNS" in result.content
    interfaces = [
        line.split(":")[0].strip()
        for line in result.content.splitlines()
        if ":" in line and not line.startswith(("ls", "Inter", " face"))
    ]
    assert interfaces == ["lo"]


async def test_shadow_and_host_secrets_are_unreadable(tools):
    result = await tools.sh("cat /etc/shadow; cat /etc/gshadow; ls /root; ls /etc/ssl/private; echo END")
    assert "END" in result.content
    host_shadow = open("/etc/shadow").read()
    for line in host_shadow.splitlines():
        secret = line.split(":")[1] if ":" in line else ""
        if len(secret) > 2:
            assert secret not in result.content
    assert "root:" not in result.content.replace("root:x:0:0", "")


async def test_host_environment_does_not_leak(tools, monkeypatch):
    marker = _marker()
    monkeypatch.setenv("AGENTRT_CANARY", marker)  # the service runs in this process
    result = await tools.sh("env; cat /proc/self/environ; cat /proc/1/environ; echo END")
    assert "END" in result.content
    assert marker not in result.content
    assert "AGENTRT_CANARY" not in result.content


async def test_writes_outside_the_workspace_leave_nothing(tools):
    marker = _marker()
    outside = tools.tmp / "outside"
    outside.mkdir()
    os.chmod(tools.tmp, 0o755)  # even a path the sandbox user could otherwise reach
    targets = [
        f"/tmp/{marker}",
        f"/{marker}",
        f"/usr/{marker}",
        f"/etc/{marker}",
        f"{outside}/{marker}",
        f"{tools.tmp}/{marker}",
        f"/var/tmp/{marker}",
        f"/dev/shm/{marker}",
        f"/root/{marker}",
    ]
    script = "; ".join(f"echo {marker} > {t}" for t in targets)
    script += f"; ln -s {outside} escape; echo {marker} > escape/{marker}; mkdir -p ../{marker}; echo END"
    result = await tools.sh(script)
    assert "END" in result.content
    for target in targets:
        assert not os.path.exists(target), target
    assert list(outside.iterdir()) == []
    assert not (tools.tmp / marker).exists()
    # and nothing anywhere under the test's directory outside the workspace carries the marker
    for dirpath, _, filenames in os.walk(tools.tmp):
        if dirpath.startswith(str(tools.workspace)):
            continue
        for name in filenames:
            assert marker not in name


async def test_runs_unprivileged_and_sees_no_host_processes(tools):
    result = await tools.sh("id -u; ls /proc | grep -c '^[0-9]'; cat /proc/self/status | grep CapEff")
    uid, nprocs, caps = result.content.splitlines()
    assert uid != "0"
    assert int(nprocs) < 10  # only the sandbox's own processes
    assert caps.split()[1] == "0000000000000000"
    # a host process is invisible by pid
    pid = os.getpid()
    assert "NOPE" in (await tools.sh(f"test -e /proc/{pid}/cmdline && echo SEEN || echo NOPE")).content


async def test_tmp_is_private_per_command(tools):
    marker = _marker()
    first = await tools.sh(f"echo {marker} > /tmp/{marker} && cat /tmp/{marker}")
    assert marker in first.content
    second = await tools.sh(f"cat /tmp/{marker} 2>&1 || echo MISSING")
    assert "MISSING" in second.content
    assert not os.path.exists(f"/tmp/{marker}")


async def test_rlimits_bound_file_size(start_server, tmp_path):
    import grpc
    from tools_helpers import ToolsEnv, make_config

    from agentrt.tools.config import CommandLimits
    from agentrt.tools.server import build_server
    from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

    config = make_config(tmp_path, limits=CommandLimits(file_size_bytes=1024 * 1024))
    address = await start_server(build_server(config))
    async with grpc.aio.insecure_channel(address) as channel:
        env = ToolsEnv(pb_grpc.ToolServiceStub(channel), channel, config, tmp_path, tmp_path / "ws")
        result = await env.sh("head -c 5000000 /dev/zero > big; ls -l big | awk '{print $5}'; ulimit -f")
        size, limit = result.content.strip().splitlines()[-2:]
        assert int(size) <= 1024 * 1024
        assert limit == "1024"  # blocks of 1 KiB


async def test_process_count_is_limited_inside_the_sandbox(tools):
    """600 background processes in one command: forks fail past RLIMIT_NPROC (512), seen from the host."""
    from tools_helpers import spawner

    from agentrt.v1 import tool_service_pb2 as pb

    limit = tools.config.limits.processes
    tag = _marker()
    stream = tools.stub.StreamExecuteTool(
        pb.StreamExecuteToolRequest(request=tools.request("exec_command", {"cmd": spawner(tag, 600, True)}))
    )
    seen, report, result = 0, "", None
    async for message in stream:
        if message.HasField("progress"):
            report += message.progress.text
            if "forked=" in report and not seen:
                forked = int(report.split()[0].split("=")[1])
                # while they all still run (a child shows its name once it has exec'd sleep)
                for _ in range(500):  # a bound, not a timing assertion
                    seen = len(_pids_with(tag + "-child"))
                    if seen >= forked:
                        break
                    await asyncio.sleep(0.02)
                (tools.workspace / "release").write_text("")
        else:
            result = message.result.result
    assert result is not None and not result.is_error, result
    forked, failed = (int(part.split("=")[1]) for part in report.split()[:2])
    assert failed > 0 and forked + failed == 600, report
    assert seen == forked and 0 < seen <= limit, (seen, report)
    assert not _pids_with(tag + "-child")  # and they all ended with the command


def _pids_with(marker: str) -> list[int]:
    from tools_helpers import pids_with

    return pids_with(marker)
