"""The local sandbox works when the tool service runs in a pid namespace of its own (a container).

The compose test's tools container failed every command with `bwrap: open /proc/4/ns/ns
failed`: bwrap looks its child up in /proc by the pid clone() returned, a pid of the guard's
pid namespace, while /proc showed the container's. On a host that pid usually names some
other process (so the lookup "worked", reading the wrong one); in a container the small pids
are free. The guard now mounts its namespace's own /proc (decision 0031).

Here `agentrt serve tools` runs under `unshare --pid --mount-proc` (as a container's pid 1
would, after a few short-lived processes took the smallest pids), and a command must run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tools_helpers import ToolsProcess, make_workspace

from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

pytestmark = pytest.mark.slow


def _container_prefix() -> tuple[str, ...]:
    """argv that starts the rest as pid 1 of a new pid namespace with its own /proc."""
    user = () if os.geteuid() == 0 else ("--user", "--map-current-user")
    # The loop takes pids 2..31 of the new namespace and frees them again, as a container's
    # entrypoint does; the service then execs as pid 1 and its sandboxes get pids above 31.
    fill = 'for i in $(seq 30); do /bin/true; done; exec "$@"'
    namespace = ("--pid", "--fork", "--kill-child", "--mount-proc")
    return ("unshare", *user, *namespace, "--", "bash", "-c", fill, "fill")


async def test_a_command_runs_when_the_service_is_pid_1_of_its_own_namespace(tmp_path: Path):
    service = ToolsProcess(tmp_path, "tools-in-ns", tmp_path / "state", prefix=_container_prefix())
    try:
        stub = await service.start()
        ws = make_workspace(tmp_path / "ws")
        cmd = json.dumps({"cmd": "echo inside > f.txt; cat f.txt"})
        call = common_pb2.ToolCall(call_id="call_ns", name="exec_command", arguments=cmd)
        resp = await stub.ExecuteTool(pb.ExecuteToolRequest(run_id="run_ns", call=call, workspace=str(ws)))
        result = resp.result
        ok = result.status == common_pb2.TOOL_RESULT_STATUS_OK and result.exit_code == 0
        assert ok, (result, service.log())
        assert "inside" in result.content
        assert (ws / "f.txt").read_text() == "inside\n"
    finally:
        # unshare ignores SIGTERM while it waits for its child: SIGKILL it, and --kill-child
        # takes the service (pid 1 of the namespace, so everything in it) along.
        if service.proc is not None and service.proc.poll() is None:
            service.kill9()
        await service.close()
