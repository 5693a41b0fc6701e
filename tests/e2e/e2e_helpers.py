"""Helpers of the end-to-end tests: free ports, waiting for files and processes with a bound, a
TCP proxy whose connections can be cut."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentrt.cli.serve import SERVICES
from tests import ports
from tests.ports import free_ports

T = TypeVar("T")

#: Bound on waiting for a mesh or a process to reach a state, in seconds.
STATE_TIMEOUT = 120.0
#: The bearer token of the `token_mesh` fixture (conftest.py): every service requires it.
MESH_TOKEN = "client-test-token"
#: AGENTRT_LOCAL_MODEL_PATH of a mesh whose models are the provider emulator: a GGUF path that
#: does not exist, so its gateway configures no local provider and does not load the llama.cpp
#: model at start (the tests of `agentrt up` and of the demo keep the real one).
NO_LOCAL_MODEL = "/nonexistent/agentrt-e2e-no-local-model.gguf"


def free_port_map(host: str = "127.0.0.1") -> dict[str, int]:
    """Return service -> a port free right now (not consecutive)."""
    return dict(zip(SERVICES, free_ports(len(SERVICES), host), strict=True))


def free_base_port(host: str = "127.0.0.1") -> int:
    """Return a base port such that base..base+4 are all free right now (tests/ports.py)."""
    return ports.free_base_port(len(SERVICES), host)


def wait_for(predicate: Callable[[], T | None], what: str, timeout: float = STATE_TIMEOUT) -> T:
    """Poll `predicate` until it returns a truthy value; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def read_manifest(state_dir: Path) -> dict[str, dict[str, object]] | None:
    """Return mesh.json of a running `agentrt up`, or None while it is not written."""
    path = state_dir / "mesh.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def agentrt(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, **kw) -> subprocess.Popen:
    """Start `python -m agentrt.cli.main ARGS` with stdout and stderr to files under cwd.

    `agentrt up` gives each service a metrics port from tests/ports.py's band unless `env`
    names one: left to itself it asks the OS for ephemeral ones, which an outgoing connection
    of the suite may hold by the time its child binds them (exit 98).
    """
    if args[:1] == ("up",):
        named = {**os.environ, **(env or {})}
        unnamed = [s for s in SERVICES if f"AGENTRT_{s.upper()}_METRICS_PORT" not in named]
        band = free_ports(len(unnamed)) if unnamed else []
        env = {
            **(env or {}),
            **{f"AGENTRT_{s.upper()}_METRICS_PORT": str(p) for s, p in zip(unnamed, band, strict=True)},
        }
    out_dir = cwd or Path.cwd()
    stdout = open(out_dir / "stdout.txt", "wb")  # noqa: SIM115 - closed with the process by the caller
    stderr = open(out_dir / "stderr.txt", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "agentrt.cli.main", *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env={**os.environ, **(env or {})},
        cwd=out_dir,
        **kw,
    )


def output_of(cwd: Path) -> str:
    """Return what a process started by `agentrt()` in cwd printed (stdout, then stderr)."""
    return (cwd / "stdout.txt").read_text(errors="replace") + (cwd / "stderr.txt").read_text(errors="replace")


def pid_alive(pid: int) -> bool:
    """Return True while a process with this pid exists (and is not a zombie of ours)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class CuttableProxy:
    """A TCP proxy to `target` whose open connections can be cut at once."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.writers: list[asyncio.StreamWriter] = []
        self.connections = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        self.server.close()


def emulator_env(emu: Any) -> dict[str, str]:
    """The gateway's provider settings for the emulator (official SDKs, base URLs only)."""
    return {
        "AGENTRT_OPENAI_BASE_URL": emu.base_url + "/v1",
        "AGENTRT_OPENAI_API_KEY": "test-key",
        "AGENTRT_ANTHROPIC_BASE_URL": emu.base_url,
        "AGENTRT_ANTHROPIC_API_KEY": "test-key",
        # a scripted provider error should fail the run at once, not after backoff
        "AGENTRT_GATEWAY_MAX_RETRIES": "0",
        "AGENTRT_LOCAL_MODEL_PATH": NO_LOCAL_MODEL,
    }
