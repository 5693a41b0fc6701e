"""kill -9 of a real ToolService process leaves no sandbox behind (local bwrap backend).

`agentrt serve tools` runs as a child process on SQLite. Commands are started through
ExecuteTool in explicit workspaces and the process is killed with SIGKILL: every process
of those sandboxes (bwrap's, the command's, the guard's) must be gone shortly after, and no
process may hold a mount of the workspace. The kill lands while some commands run and
others are still being set up (bwrap between its clone and its command): the second case is
where bwrap's own `--die-with-parent` leaves its namespace's pid 1 orphaned forever
(decision 0031).

Then the start-up reaper: a guard that cannot act (stopped) survives its owner's kill -9;
a tool service on another state directory leaves it alone, one on the same state directory
reaps it before it serves, and a sandbox whose owner is alive is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import time
from pathlib import Path

import pytest
from tools_helpers import STATE_TIMEOUT, ToolsProcess

from agentrt.tools.sandbox.guard import GUARD_NAME
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.slow

#: How long sandboxes may take to go once their owner is dead, seconds. The guard reacts in
#: milliseconds; an orphan of the old launch lived as long as its command (600 s here).
GONE_TIMEOUT = 15.0


def _cmdlines() -> dict[int, bytes]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found[int(entry)] = f.read()
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        del found[int(entry)]
            except OSError:
                found.pop(int(entry), None)
    return found


def survivors(token: str) -> list[str]:
    """Live processes whose command line holds token: '<pid> <argv...>' (zombies left out)."""
    found = []
    for pid, line in _cmdlines().items():
        if token.encode() in line:
            found.append(f"{pid} " + line.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


def holders(path_token: str) -> list[int]:
    """Pids whose mount table names a path holding path_token (a bind mount of the workspace)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/mountinfo") as f:
                    if path_token in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def kill_all(token: str) -> None:
    """Cleanup of a failed run: SIGKILL whatever still holds token (host side, as root)."""
    for line in survivors(token):
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


async def wait_gone(token: str, path_token: str) -> None:
    deadline = time.monotonic() + GONE_TIMEOUT
    while survivors(token) or holders(path_token):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{GONE_TIMEOUT:.0f} s after the owner's kill -9, still alive: {survivors(token)}; "
                f"holding the workspace: {holders(path_token)}"
            )
        await asyncio.sleep(0.05)


def exec_request(workspace: Path, call: str, cmd: str) -> pb.ExecuteToolRequest:
    return pb.ExecuteToolRequest(
        run_id="run_kill",
        call=common_pb2.ToolCall(call_id=call, name="exec_command", arguments=json.dumps({"cmd": cmd})),
        workspace=str(workspace),
    )


async def start_commands(
    stub: pb_grpc.ToolServiceStub, workspace: Path, token: str, count: int
) -> list[asyncio.Task]:
    """Start count `sleep 600.<token>` commands, each touching up-<i> first; return the call tasks."""
    calls = []
    for i in range(count):
        cmd = f"touch up-{i}; exec sleep 600.{token}"
        call = f"call_{token}_{i}"  # a new key each round: the last round's are journaled
        calls.append(asyncio.ensure_future(stub.ExecuteTool(exec_request(workspace, call, cmd))))
    return calls


async def until(predicate, what: str) -> None:
    deadline = time.monotonic() + STATE_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.mark.skipif(os.geteuid() != 0, reason="kills processes of the sandbox uid: needs root")
async def test_kill_9_of_the_tool_service_leaves_no_sandbox(tmp_path: Path):
    service = ToolsProcess(tmp_path, "tools", tmp_path / "state")
    stub = await service.start()
    rounds = 3
    tokens = [f"{secrets.randbelow(10**6):06d}" for _ in range(rounds)]
    try:
        for n, token in enumerate(tokens):
            workspace = tmp_path / f"ws-{token}"
            calls = await start_commands(stub, workspace, token, 12)
            # kill as soon as one command runs: the others are still starting (bwrap setting up)
            await until(lambda ws=workspace: any(ws.glob("up-*")), "a command to run")
            service.kill9()
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            await wait_gone(token, f"ws-{token}")
            if n < rounds - 1:
                stub = await service.start()
    finally:
        await service.close()
        for token in tokens:
            kill_all(token)


def guard_of(token: str) -> int:
    """The pid of the guard (pid 1 of its pid namespace) whose sandbox runs token's command."""
    for pid, line in _cmdlines().items():
        if token.encode() in line and GUARD_NAME.encode() in line:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
                nspid = next(x for x in f.read().splitlines() if x.startswith("NSpid:")).split()
                if len(nspid) > 2 and nspid[-1] == "1":
                    return pid
    raise AssertionError(f"no guard runs {token}: {survivors(token)}")


def command_alive(token: str) -> bool:
    return any(line.split(" ", 1)[1].startswith(f"sleep 600.{token}") for line in survivors(token))


@pytest.mark.skipif(os.geteuid() != 0, reason="kills processes of the sandbox uid: needs root")
async def test_a_restart_reaps_the_orphans_of_its_own_state_directory_only(tmp_path: Path):
    state, other_state = tmp_path / "state", tmp_path / "other-state"
    services = [ToolsProcess(tmp_path, name, state) for name in ("a", "b", "d")]
    a, b, d = services
    c = ToolsProcess(tmp_path, "c", other_state)
    services.append(c)
    orphan, live = (f"{secrets.randbelow(10**6):06d}" for _ in range(2))
    try:
        stub = await a.start()
        ws = tmp_path / f"ws-{orphan}"
        call = asyncio.ensure_future(
            stub.ExecuteTool(exec_request(ws, "call_orphan", f"touch up-0; exec sleep 600.{orphan}"))
        )
        await until(lambda: (ws / "up-0").exists(), "a's command to run")
        # A guard that cannot act (stopped) outlives its owner: an orphan, as before the guard.
        os.kill(guard_of(orphan), signal.SIGSTOP)
        a.kill9()
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        await c.start()  # another state directory: not its orphan
        assert command_alive(orphan), survivors(orphan)

        stub = await b.start()  # a's state directory: reaped before b serves
        assert not command_alive(orphan), survivors(orphan)
        await wait_gone(orphan, f"ws-{orphan}")
        assert "reaped 1 sandbox(es)" in b.log()

        ws = tmp_path / f"ws-{live}"
        call = asyncio.ensure_future(
            stub.ExecuteTool(exec_request(ws, "call_live", f"touch up-0; exec sleep 600.{live}"))
        )
        await until(lambda: (ws / "up-0").exists(), "b's command to run")
        await d.start()  # the same state directory, but b is alive: its sandbox is not an orphan
        assert command_alive(live) and "reaped" not in d.log(), survivors(live)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
    finally:
        for service in services:
            await service.close()
        kill_all(orphan)
        kill_all(live)
