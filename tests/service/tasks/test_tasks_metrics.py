"""TaskService's series in its server's registry (the one its /metrics serves): spawns, stops."""

from __future__ import annotations

import grpc
import pytest

from agentrt.v1 import task_service_pb2 as pb
from tests.emulators.providers import Reply


async def test_spawns_and_stops_are_counted_by_outcome(tm):
    registry = tm.server.registry
    assert registry is not None
    tm.mesh.emu.script([Reply(text="done")])
    task = await tm.spawn(await tm.parent())
    await tm.wait_task(task.task_id, pb.TASK_STATUS_COMPLETED)
    await tm.tasks.StopTask(pb.StopTaskRequest(task_id=task.task_id))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await tm.tasks.SpawnTask(pb.SpawnTaskRequest(parent_session_id="ses_missing", input="go"))
    assert refused.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
    reason = refused.value.trailing_metadata()
    assert registry.get_sample_value("agentrt_tasks_spawns_total", {"outcome": "ok"}) == 1
    refusals = [
        s.value
        for metric in registry.collect()
        if metric.name == "agentrt_tasks_spawns"
        for s in metric.samples
        if s.name == "agentrt_tasks_spawns_total" and s.labels["outcome"] != "ok"
    ]
    assert refusals == [1.0], reason
    assert registry.get_sample_value("agentrt_tasks_stops_total", {"outcome": "already_finished"}) == 1
    assert (
        registry.get_sample_value(
            "agentrt_rpc_server_requests_total",
            {"service": "agentrt.v1.TaskService", "method": "SpawnTask", "code": "OK"},
        )
        == 1
    )
