"""Issue 10 through ToolService: bad bytes, byte caps, apply_patch anchors, bad input.

Every case goes through the production server over a real channel and checks what the
caller (the run loop, or any gRPC client) actually receives.
"""

from __future__ import annotations

import json
import re

import grpc
import pytest
from test_tools_archive import make_tar, target, upload
from tools_helpers import make_workspace

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

MARKER = re.compile(r"\n\[\.\.\. (\d+) bytes of output dropped \.\.\.\]\n")


@pytest.fixture
def ws(tools):
    return make_workspace(tools.workspace)


def _reason(result: common_pb2.ToolResult) -> str:
    return json.loads(result.details_json).get("reason", "")


def check_head_tail(content: str, real: str, cap: int) -> None:
    """content is real capped to cap bytes: a prefix, the marker, a suffix; counted right."""
    assert len(content.encode()) <= cap, (len(content.encode()), cap)
    assert "\ufffd" not in content  # no character was cut in two
    head, dropped, tail = MARKER.split(content)
    assert real.startswith(head) and real.endswith(tail)
    assert int(dropped) == len(real.encode()) - len(head.encode()) - len(tail.encode())


# -- bad bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "where"),
    [
        ("write_file", '{"path": "s.txt", "content": "a\\ud99cb"}', "/content"),
        ("exec_command", '{"cmd": "echo \\udc00"}', "/cmd"),
        ("write_file", '{"path": "\\ud800.txt", "content": "x"}', "/path"),
    ],
)
async def test_lone_surrogates_are_a_result_the_model_can_correct(tools, ws, tool, arguments, where):
    resp = await tools.run(tool, arguments, call_id="bad")
    assert resp.result.is_error and _reason(resp.result) == "INVALID_ARGUMENTS"
    assert where in resp.result.content and "surrogate" in resp.result.content
    assert list(ws.iterdir()) == []
    again = await tools.run(tool, arguments, call_id="bad")  # journaled like any result
    assert again.replayed and again.result.content == resp.result.content


# -- byte caps ---------------------------------------------------------------------------


async def test_command_output_cap_holds_in_bytes_on_character_boundaries(tools, ws):
    real = "中" * 6000 + "end"
    result = await tools.sh("for i in $(seq 1 6000); do printf '中'; done; printf end", max_output_bytes=1001)
    assert result.output_truncated
    check_head_tail(result.content, real, 1001)
    assert result.content.endswith("end")


async def test_read_file_cap_holds_in_bytes_on_character_boundaries(tools, ws):
    real = "é" + "日本語" * 3000 + "!"
    (ws / "cjk.txt").write_text(real, encoding="utf-8")
    resp = await tools.run("read_file", {"path": "cjk.txt"}, max_output_bytes=2000)
    assert resp.result.output_truncated
    check_head_tail(resp.result.content, real, 2000)


async def test_output_within_the_cap_is_whole(tools, ws):
    result = await tools.sh("printf '日本語'", max_output_bytes=256)
    assert result.content == "日本語" and not result.output_truncated


# -- apply_patch anchors (004 §2.7s) -----------------------------------------------------

SOURCE = "def first():\n\tif ready:\n\t\treturn 1\n\ndef second():\n    if ready:\n        return 2\n"


async def test_an_indented_anchor_binds_its_own_line_not_a_lookalike(tools, ws):
    (ws / "m.py").write_text(SOURCE)
    patch = "*** Begin Patch\n*** Update File: m.py\n@@     if ready:\n+        log()\n*** End Patch\n"
    resp = await tools.run("apply_patch", {"patch": patch})
    assert not resp.result.is_error, resp.result.content
    assert (ws / "m.py").read_text() == SOURCE.replace("    if ready:\n", "    if ready:\n        log()\n")


async def test_an_ambiguous_trimmed_anchor_fails_and_names_the_lines(tools, ws):
    (ws / "m.py").write_text(SOURCE)
    before = (ws / "m.py").read_bytes()
    patch = "*** Begin Patch\n*** Update File: m.py\n@@ if ready:\n+        log()\n*** End Patch\n"
    resp = await tools.run("apply_patch", {"patch": patch})
    assert resp.result.is_error and "Applied" not in resp.result.content
    assert "lines 2, 6" in resp.result.content
    assert (ws / "m.py").read_bytes() == before


# -- bad input never reaches INTERNAL ----------------------------------------------------


async def test_long_paths_in_workspace_archives_are_invalid_arguments(tools, ws):
    long = "a" * 256
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await upload(tools.stub, target(workspace=str(ws), path=long), make_tar([("f", "file", b"x")]))
    assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
    assert details_of(info.value)[1]["field"] == "target.path"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in tools.stub.DownloadWorkspace(
            pb.DownloadWorkspaceRequest(target=target(workspace=str(ws), path=long))
        ):
            pass
    assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
    deep = "/".join(["d"] * 300)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await upload(tools.stub, target(workspace=str(ws), path=deep), make_tar([("f", "file", b"x")]))
    assert reason_of(info.value) == "INVALID_VALUE"
    assert list(ws.iterdir()) == []


async def test_an_error_echoing_a_huge_id_reaches_a_default_client(tools):
    # tools.stub is on a default channel: gRPC's own 8 KiB limit on metadata.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="é" * 5000))
    assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ID")
    assert len(info.value.details().encode()) <= 1024
    assert "éééé" in info.value.details()  # a bounded prefix of what it echoes


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(1, -5), (-1, 5), (1, 2_000_000_000), (-3, 0), (86_401, 0), (315_576_000_001, 0)],
    ids=["mixed-signs", "mixed-signs-2", "nanos-range", "negative", "over-a-day", "seconds-range"],
)
async def test_malformed_or_out_of_range_timeouts_are_refused(tools, ws, seconds, nanos):
    req = tools.request("read_file", {"path": "x"}, call_id="t1")
    req.timeout.seconds, req.timeout.nanos = seconds, nanos
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.stub.ExecuteTool(req)
    assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
    assert details_of(info.value)[1]["field"] == "timeout"
    # Nothing was recorded: the same call id runs once the request is fixed.
    req.timeout.seconds, req.timeout.nanos = 5, 0
    assert not (await tools.stub.ExecuteTool(req)).replayed
