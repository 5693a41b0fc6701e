"""Helpers of the ToolService tests (imported by the tests and their conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.config import ServerConfig
from agentrt.tools.config import ToolsConfig
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc
from tests.ports import free_ports
from tests.stores import PG_URL, pg_reachable  # noqa: F401 - re-exported to the suite


@dataclass
class ToolsEnv:
    """A running tool service and what a test needs around it."""

    stub: pb_grpc.ToolServiceStub
    channel: grpc.aio.Channel
    config: ToolsConfig
    tmp: Path
    workspace: Path
    tenant: str = "default"

    def request(
        self,
        tool: str,
        args: dict | str | None = None,
        *,
        run_id: str = "run_1",
        call_id: str = "call_1",
        workspace: str | None = None,
        timeout: float | None = None,
        max_output_bytes: int = 0,
        sandbox_id: str = "",
    ) -> pb.ExecuteToolRequest:
        arguments = args if isinstance(args, str) else json.dumps(args or {})
        req = pb.ExecuteToolRequest(
            run_id=run_id,
            call=common_pb2.ToolCall(call_id=call_id, name=tool, arguments=arguments),
            sandbox_id=sandbox_id,
            workspace="" if sandbox_id else (str(self.workspace) if workspace is None else workspace),
            max_output_bytes=max_output_bytes,
        )
        if timeout is not None:
            req.timeout.FromNanoseconds(int(timeout * 1e9))
        return req

    async def run(self, tool: str, args: dict | str | None = None, **kw) -> pb.ExecuteToolResponse:
        return await self.stub.ExecuteTool(self.request(tool, args, **kw))

    async def sh(self, cmd: str, **kw) -> common_pb2.ToolResult:
        kw.setdefault("call_id", f"call_{os.urandom(6).hex()}")
        return (await self.run("exec_command", {"cmd": cmd}, **kw)).result


SANDBOX_UID = 65534
#: Bound on waiting for a state (a service process serving, processes gone), seconds.
STATE_TIMEOUT = 60.0


def make_workspace(path: Path) -> Path:
    """Create a workspace directory the way the service hands over one it creates.

    As root the service never chowns a directory it did not create, and refuses commands
    in a root-owned one; a test that prepares files before the first call therefore gives
    the directory to the sandbox uid, as the service would have.
    """
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


def make_config(tmp: Path, db_url: str = "", **overrides) -> ToolsConfig:
    return ToolsConfig(server=ServerConfig(port=0, state_dir=str(tmp / "state"), db_url=db_url), **overrides)


def pids_with(marker: str) -> list[int]:
    """Host-side: pids whose command line contains marker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


#: Forks `count` children named `<tag>-child` (each execs sleep), reports how many forks
#: failed, then waits for the file `release` in its directory (when asked to). No fork bomb:
#: the loop is bounded and the children never fork.
_SPAWNER = """
import os, sys, time
tag, count, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "wait"
ok = failed = 0
for _ in range(count):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        try:
            os.execv("/bin/sleep", [tag + "-child", "120"])
        finally:
            os._exit(127)
    ok += 1
print(f"forked={ok} failed={failed}", flush=True)
while wait and not os.path.exists("release"):
    time.sleep(0.02)
"""


def spawner(tag: str, count: int, wait: bool) -> str:
    """The shell text running _SPAWNER (its children's name never appears in it whole)."""
    quoted = _SPAWNER.replace("'", "'\\''")
    return f"python3 -c '{quoted}' {tag} {count} {'wait' if wait else 'go'}"


class HostListener:
    """A host-side TCP or UDP listener that records what reaches it."""

    def __init__(self, family: int, kind: int, host: str) -> None:
        self.sock = socket.socket(family, kind)
        self.sock.bind((host, 0))
        self.sock.setblocking(False)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.kind = kind

    def received(self) -> bytes:
        data = b""
        try:
            if self.kind == socket.SOCK_STREAM:
                while True:
                    conn, _ = self.sock.accept()
                    conn.settimeout(2)
                    data += conn.recv(4096) or b"<connected>"
                    conn.close()
            while True:
                data += self.sock.recv(4096)
        except OSError:  # BlockingIOError included: nothing more is waiting
            return data

    def close(self) -> None:
        self.sock.close()


async def until(predicate, what: str, bound_s: float = 15.0):
    """Poll predicate() (sync or async) until truthy, at most bound_s seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + bound_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class ToolsProcess:
    """`agentrt serve tools` as a child process (its own port, state directory and log)."""

    def __init__(self, tmp: Path, name: str, state_dir: Path, prefix: tuple[str, ...] = ()) -> None:
        """Name the process; prefix: an argv run before the service's (it execs the rest)."""
        self.tmp, self.name, self.state_dir, self.prefix = tmp, name, state_dir, prefix
        self.port = free_ports(1, "127.0.0.1")[0]
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.channels: list[grpc.aio.Channel] = []

    async def start(self) -> pb_grpc.ToolServiceStub:
        """Start the process and return a stub once its health answers SERVING."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "AGENTRT_STATE_DIR": str(self.state_dir), "AGENTRT_SANDBOX": "bwrap"}
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "agentrt.cli.main", "serve", "tools",
             "--port", str(self.port)],
            env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + STATE_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            with contextlib.suppress(grpc.aio.AioRpcError):
                async with grpc.aio.insecure_channel(self.address) as channel:
                    resp = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=2
                    )
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    self.channels.append(grpc.aio.insecure_channel(self.address))
                    return pb_grpc.ToolServiceStub(self.channels[-1])
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} did not serve: {self.log()}")

    def kill9(self) -> None:
        """SIGKILL the process and reap it."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def drain(self, bound_s: float = STATE_TIMEOUT) -> int:
        """SIGTERM the process and return its exit status once it has drained."""
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(bound_s)

    async def close(self) -> None:
        """Stop the process if it runs (SIGTERM, then SIGKILL after 30 s) and close the channels."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.drain(30)
            except subprocess.TimeoutExpired:
                self.kill9()
        for channel in self.channels:
            await channel.close()
        self.channels.clear()

    def log(self) -> str:
        """The process's log (stdout and stderr), whole."""
        return self.log_path.read_text(errors="replace")
