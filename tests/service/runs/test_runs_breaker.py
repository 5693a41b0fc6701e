"""Defects found by attacking a live mesh (issue 10 "every request field is range-checked").

Each test is marked xfail(strict=True) until the runtime is fixed: it fails on today's code.
"""

from __future__ import annotations

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import Reply
from tests.service.runs.harness import agent


@pytest.mark.xfail(
    strict=True,
    reason="StartRun does not bound labels: a 3 MB label value (or 20,000 labels) is stored and echoed "
    "by GetRun/ListRuns, so two such runs make ListRuns answer RESOURCE_EXHAUSTED to a default client",
)
async def test_oversized_labels_are_refused(mesh):
    for labels in ({"a": "v" * 3_000_000}, {f"k{i}": "v" for i in range(20_000)}, {"k" * 5_000: "v"}):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="hi", labels=labels))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(info.value) in ("REQUEST_TOO_LARGE", "INVALID_VALUE")
    # nothing was recorded, and the list still fits a default client's 4 MiB message limit
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


@pytest.mark.xfail(
    strict=True,
    reason="StartRun answers a replay with the same idempotency_key but another input (or agent) with "
    "the first run, silently; docs/errors.md has IDEMPOTENCY_KEY_REUSED for this (TaskService uses it)",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="ResumeRun with an approve and a deny for the same call is refused with 'call ... is not "
    "waiting for an approval', which is false (it is waiting); the message should name the duplicate",
)
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
