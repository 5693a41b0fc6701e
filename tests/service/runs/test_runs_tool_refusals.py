"""A call the tool service refused before running it has a known outcome: it did not run.

The tool service answers ExecuteTool with INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION
(and the interceptor's UNAUTHENTICATED, PERMISSION_DENIED) only before anything runs and
before anything is journaled (docs/services/tools.md "RPCs", "The journal"). Such a call's
result says so ("The tool service refused this call: ...", NOT_EXECUTED), never that its
outcome is unknown (INTERRUPTED), and nothing asks for a reconciliation. Decision 0046.
"""

from __future__ import annotations

import json
import os

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.needs import unavailable
from tests.service.runs.harness import agent

REFUSED = "The tool service refused this call: "


def _results(events: list[pb.RunEvent]) -> list[cpb.ToolResult]:
    return [e.tool_returned.result for e in events if e.WhichOneof("payload") == "tool_returned"]


async def _stored_statuses(mesh, session_id: str) -> list[int]:
    entries = await mesh.entries(session_id)
    return [e.item.tool_result.status for e in entries if e.item.HasField("tool_result")]


async def test_a_command_in_a_workspace_it_cannot_write_is_a_refusal_the_model_reads(mesh):
    if os.geteuid() != 0:
        unavailable("the tool service refuses commands in a root-owned workspace only when it runs as root")
    workspace = os.path.join(mesh.work, "root-owned")
    os.mkdir(workspace, 0o755)  # root's, and not created by the tool service: commands cannot write
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo hi > out.txt"}))]),
            Reply(text="I could not write there."),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=workspace))
    run = await mesh.wait_status(
        started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_SUSPENDED
    )
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "I could not write there."
    (result,) = _results(await mesh.events(started.run_id))
    assert result.status == cpb.TOOL_RESULT_STATUS_NOT_EXECUTED and result.is_error
    assert result.content.startswith(REFUSED) and "chown it" in result.content, result.content
    assert "unknown" not in result.content
    # the model read the refusal, and nothing ran
    assert len(mesh.emu.requests) == 2
    assert REFUSED in json.dumps(mesh.emu.requests[-1][1])
    assert os.listdir(workspace) == []
    assert await _stored_statuses(mesh, started.session_id) == [cpb.TOOL_RESULT_STATUS_NOT_EXECUTED]


async def test_a_workspace_no_tool_can_use_fails_the_run_and_its_call_did_not_run(mesh):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("list_files", "{}")])])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(), input="go", workspace="/nonexistent-parent/ws")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "invalid_workspace"
    (result,) = _results(await mesh.events(started.run_id))
    assert result.status == cpb.TOOL_RESULT_STATUS_NOT_EXECUTED and result.is_error
    assert result.content.startswith(REFUSED) and "unknown" not in result.content, result.content
    assert await _stored_statuses(mesh, started.session_id) == [cpb.TOOL_RESULT_STATUS_NOT_EXECUTED]
