"""The run loop's metrics that need the store, and the span helpers of its phases.

`store_gauges` counts what lies in the runs store (suspended runs, tool calls waiting for an
approval, runs that should execute and no live replica holds) for `RunMetrics.observe_store`;
the lease loop (manager.py) calls it once per period. It reads the same on every replica,
so dashboards and an autoscaler aggregate with max() (docs/operations.md "Metrics").

`record_generation` and `record_tool_result` put a model answer or a tool result on their
span (mesh/telemetry): ids, usage and outcome always; the conversation content only when
tracing content was opted into (004 §2.11c), which `set_content` decides.
"""

from __future__ import annotations

import json
import time

from google.protobuf.json_format import MessageToDict
from sqlalchemy import func, select

from agentrt.mesh import telemetry
from agentrt.runs.storage.models import RunRow
from agentrt.runs.storage.store import RunStore
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import run_service_pb2 as pb


async def store_gauges(store: RunStore) -> tuple[int, int, int]:
    """Return (suspended runs, calls waiting for an approval, runs waiting for a replica).

    "Waiting for a replica": RUNNING with an expired (or no) lease, i.e. a replica died
    or a resumed run is not claimed yet; takeover picks them up at the next scan.
    """
    now = time.time()
    async with store.db.read() as conn:
        waiting = (
            await conn.execute(
                select(func.count())
                .select_from(RunRow)
                .where(RunRow.status == cpb.RUN_STATUS_RUNNING, RunRow.lease_expires_s < now)
            )
        ).scalar_one()
        rows = (
            await conn.execute(select(RunRow.pending).where(RunRow.status == cpb.RUN_STATUS_SUSPENDED))
        ).all()
    approvals = 0
    for (blob,) in rows:
        if blob:
            calls = pb.RunSuspended.FromString(blob).pending_calls
            approvals += sum(1 for c in calls if c.kind == pb.PENDING_CALL_KIND_APPROVAL)
    return len(rows), approvals, int(waiting)


def record_request(span: telemetry.GenerationSpan, request: gpb.ModelRequest) -> None:
    """Put a model request's messages on its generation span: content, only when opted in."""
    if telemetry.content_enabled():
        messages = [MessageToDict(m) for m in request.messages]
        span.set_content("gen_ai.input.messages", json.dumps(messages, ensure_ascii=False))
        if request.system:
            span.set_content("gen_ai.system_instructions", request.system)


def record_generation(span: telemetry.GenerationSpan, final: gpb.GenerateResponse) -> None:
    """Put a model answer on its generation span (ids and usage; the output text as content)."""
    response, usage = final.response, final.response.usage
    span.set_response(
        response_id=response.response_id,
        model=response.model.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        finish_reasons=[cpb.StopReason.Name(response.stop_reason)],
    )
    span.set("agentrt.gateway.retries", final.retries)
    if telemetry.content_enabled():
        text = "".join(b.text.text for b in response.content if b.WhichOneof("block") == "text")
        span.set_content("gen_ai.output.messages", text)


def record_tool_result(span: telemetry.ToolCallSpan, result: cpb.ToolResult) -> None:
    """Put a tool result on its tool call span (status always; the content when opted in)."""
    span.set_result(is_error=result.is_error, outcome=cpb.ToolResultStatus.Name(result.status).lower()[19:])
    span.set_content("gen_ai.tool.call.result", result.content)
