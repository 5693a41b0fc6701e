"""Defects found by a second breaker attacking a live mesh (bad input: a clear status, nothing changed).

Each is marked xfail(strict=True) until its fix lands.
"""

from __future__ import annotations

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.harness import agent


@pytest.mark.xfail(
    strict=True,
    reason="StartRun takes an idempotency_key with control characters (labels refuse them); on "
    "PostgreSQL a NUL in it is INTERNAL 'internal error' from the store, not INVALID_ARGUMENT",
)
async def test_an_idempotency_key_with_control_characters_is_refused(store_mesh):
    mesh = store_mesh
    mesh.emu.script([Reply(text="a"), Reply(text="b")])
    first = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="first"))
    await mesh.wait_status(first.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    for key in ("a\x00b", "a\nb"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="second", idempotency_key=key))
        assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
        assert "idempotency_key" in info.value.details()
    # nothing was recorded, and the server keeps serving
    runs = (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs
    assert [r.run_id for r in runs] == [first.run_id]
