"""Defects found by attacking a live mesh (issue 10 "every request field is range-checked").

Each failed before its fix (a fresh breaker attacking a live mesh found them).
"""

from __future__ import annotations

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.harness import agent


async def test_oversized_labels_are_refused(mesh):
    for labels in ({"a": "v" * 3_000_000}, {f"k{i}": "v" for i in range(20_000)}, {"k" * 5_000: "v"}):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="hi", labels=labels))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(info.value) in ("REQUEST_TOO_LARGE", "INVALID_VALUE")
    # nothing was recorded, and the list still fits a default client's 4 MiB message limit
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


async def test_idempotency_key_reused_for_another_request_is_refused(mesh):
    mesh.emu.script([Reply(text="a")])
    first = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="first", idempotency_key="k1"))
    replay = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="first", idempotency_key="k1"))
    assert replay.run_id == first.run_id  # a true replay is the same run
    for other in (
        pb.StartRunRequest(agent=agent(), input="something else", idempotency_key="k1"),
        pb.StartRunRequest(agent=agent("anthropic"), input="first", idempotency_key="k1"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(other)
        assert (info.value.code(), reason_of(info.value)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "IDEMPOTENCY_KEY_REUSED",
        )
    assert [r.run_id for r in (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs] == [first.run_id]


async def test_two_decisions_for_one_call_are_refused_naming_the_duplicate(mesh):
    from tests.service.runs.test_runs_approval import start_gated

    started, run, _ = await start_gated(mesh)
    call_id = next(p.call.call_id for p in run.pending_calls if p.call.name == "exec_command")
    decisions = [
        pb.ApprovalDecision(call_id=call_id, approved=True),
        pb.ApprovalDecision(call_id=call_id, approved=False, message="no"),
    ]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, decisions=decisions))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert call_id in [p.call.call_id for p in after.pending_calls]  # nothing changed: it still waits
    assert "not waiting" not in info.value.details(), info.value.details()
    assert "more than once" in info.value.details() or "duplicate" in info.value.details().lower()


async def test_labels_within_bounds_are_kept_and_control_characters_refused(mesh):
    mesh.emu.script([Reply(text="a")])
    labels = {f"k{i}": "v" * 1024 for i in range(64)}
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="hi", labels=labels))
    assert dict((await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run.labels) == labels
    for bad in ({"": "v"}, {"k\n": "v"}, {"k": "line\nbreak"}):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="hi", labels=bad))
        assert (info.value.code(), reason_of(info.value)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_VALUE",
        )
