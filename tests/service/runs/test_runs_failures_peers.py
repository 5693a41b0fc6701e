"""A run's failure names the peer that refused it (runs/loop/failures.py `failure_of`)."""

from __future__ import annotations

import pytest

from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent, start_mesh

#: Larger than the session store's bound on one entry (sessions/codec.py MAX_ENTRY_BYTES, 3 MiB).
TOO_LARGE_CHARS = 3 * 1024 * 1024 + 64 * 1024


@pytest.mark.parametrize("local", [False, True], ids=["wire", "local"])
async def test_a_batch_the_session_store_refuses_fails_the_run_naming_the_session_store(
    start_server, tmp_path, emulator, local
):
    # local: the run loop calls the session store in this process (`agentrt serve all`).
    mesh = await start_mesh(start_server, tmp_path, emulator, local=local)
    huge = '{"city": "' + "x" * TOO_LARGE_CHARS + '"}'
    # Streamed in a few large deltas: at the emulator's 8 characters a delta, the gateway
    # would parse some 400,000 events before the run saw the call.
    reply = Reply(tool_calls=[ToolCallReply("read_file", huge)], chunk_chars=1 << 20)
    mesh.emu.script([reply, Reply(text="never asked")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    failure = run.failure
    assert failure.kind == "invalid_request" and not failure.retryable, failure
    assert failure.reason == "REQUEST_TOO_LARGE", failure
    assert "session store" in failure.message and "model" not in failure.message, failure
    assert "entries[" in failure.debug_message and "limit per entry" in failure.debug_message, failure
    assert len(mesh.emu.requests) == 1  # the model was not asked again
