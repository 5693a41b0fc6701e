"""A real ToolService process, driven through the calls a run loop makes, then drained by SIGTERM.

Its log must end without asyncio's complaints about tasks and futures dropped unawaited
("Task was destroyed but it is pending!", "... exception was never retrieved"). Two did:
StreamExecuteTool waited for each output chunk through a helper task of its own, and a
handler that ended while waiting (its caller went away mid-command) left that task pending
on a queue nobody referenced any more, to be garbage-collected later; and an upload whose
caller went away left its worker's ending (an exception) unretrieved.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import grpc
import pytest
from tools_helpers import ToolsProcess, until

from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

pytestmark = pytest.mark.slow

COMPLAINTS = ("Task was destroyed but it is pending", "exception was never retrieved")


def archive(members: int, size: int) -> bytes:
    """A plain tar of `members` files of `size` bytes each."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(members):
            info = tarfile.TarInfo(f"f{i}")
            info.size = size
            tar.addfile(info, io.BytesIO(b"x" * size))
    return buf.getvalue()


def request(workspace: Path, call: str, args: dict) -> pb.ExecuteToolRequest:
    return pb.ExecuteToolRequest(
        run_id="run_drain",
        call=common_pb2.ToolCall(call_id=call, name="exec_command", arguments=json.dumps(args)),
        workspace=str(workspace),
    )


async def test_a_drained_tool_service_leaves_no_task_unawaited(tmp_path: Path):
    service = ToolsProcess(tmp_path, "tools", tmp_path / "state")
    stub = await service.start()
    ws = tmp_path / "ws"
    try:
        # Callers that go away after the first chunk of a streamed command (a runs replica
        # killed or cancelled mid-call); each handler ends while it waits for the next chunk.
        for i in range(20):
            cmd = {"cmd": "echo a; sleep 0.3; echo b"}
            call = stub.StreamExecuteTool(pb.StreamExecuteToolRequest(request=request(ws, f"gone_{i}", cmd)))
            first = await call.read()
            assert first.progress.text.strip() == "a"
            call.cancel()
        # Uploads and downloads whose caller goes away mid-transfer.
        blob = archive(8, 300_000)
        for i in range(8):
            hold = asyncio.Event()

            async def chunks(i: int = i, hold: asyncio.Event = hold):
                target = pb.WorkspaceTarget(workspace=str(ws), path=f"up{i}")
                yield pb.UploadWorkspaceRequest(target=target, data=blob[: 1 << 20])
                yield pb.UploadWorkspaceRequest(data=blob[1 << 20 : 2 << 20])
                await hold.wait()  # the rest never comes

            upload = stub.UploadWorkspace(chunks())
            await until(lambda i=i: (ws / f"up{i}" / "f5").exists(), "the upload to write what it got")
            upload.cancel()
            hold.set()
            whole = pb.WorkspaceTarget(workspace=str(ws))
            download = stub.DownloadWorkspace(pb.DownloadWorkspaceRequest(target=whole))
            assert (await download.read()).data
            download.cancel()
        # A stream read to its end, a caller's deadline, a named shell.
        messages = [m async for m in stub.StreamExecuteTool(
            pb.StreamExecuteToolRequest(request=request(ws, "whole", {"cmd": "echo x; echo y >&2"}))
        )]  # fmt: skip
        assert messages[-1].result.result.content.strip() and not messages[-1].result.result.is_error
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ExecuteTool(request(ws, "late", {"cmd": "sleep 5"}), timeout=0.3)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        shell = await stub.ExecuteTool(request(ws, "shell", {"cmd": "cd /tmp", "session_id": "s"}))
        assert not shell.result.is_error
        # In flight at SIGTERM: a one-shot command, a streamed one, a named shell's.
        pending = [
            asyncio.ensure_future(stub.ExecuteTool(request(ws, "inflight", {"cmd": "echo go; sleep 30"}))),
            asyncio.ensure_future(
                stub.ExecuteTool(request(ws, "inshell", {"cmd": "sleep 30", "session_id": "s"}))
            ),
        ]
        streamed = stub.StreamExecuteTool(
            pb.StreamExecuteToolRequest(request=request(ws, "instream", {"cmd": "echo go; sleep 30"}))
        )
        assert (await streamed.read()).progress.text.strip() == "go"
        assert await asyncio.to_thread(service.drain) == 0
        await asyncio.gather(*pending, return_exceptions=True)
        streamed.cancel()
    finally:
        await service.close()
    log = service.log()
    for complaint in COMPLAINTS:
        assert complaint not in log, log[log.index(complaint) - 200 :][:3000]
