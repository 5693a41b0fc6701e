"""Issue 10 (and issue 9's Anthropic overflow) through RunService: a run keeps its shape.

Each case is what a new user meets with a real provider's wire shape (the emulator sends
it): a repeated response id, an overflow worded by Azure, Anthropic's success-shaped
overflow, a lone surrogate in a client-declared tool's arguments, a flood of multi-byte
tool progress, and malformed Durations in an agent.
"""

from __future__ import annotations

import json
import os

import grpc
import pytest

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply
from tests.service.runs.harness import agent


async def test_a_server_repeating_its_response_id_does_not_fail_the_run(mesh):
    mesh.emu.script(
        [
            Reply(
                tool_calls=[ToolCallReply("list_files", "{}")], response_id="chatcmpl-static", input_tokens=30
            ),
            Reply(text="nothing here", response_id="chatcmpl-static", input_tokens=40),
        ]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent("openai-chat"), input="what is here?", workspace=mesh.work)
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.final_output == "nothing here" and run.usage.input_tokens == 70
    billed = [e.usage.input_tokens for e in await mesh.entries(started.session_id) if e.HasField("usage")]
    assert billed == [30, 40]  # one entry per response, both responses


async def test_an_azure_worded_overflow_fails_the_run_as_context_overflow(mesh):
    mesh.emu.script(
        [
            ErrorReply(
                status=400,
                kind="invalid_request",
                message="Input tokens exceed the configured limit of 8192 tokens.",
            )
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent("openai-chat"), input="hello"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED)
    assert run.failure.kind == "context_overflow" and run.failure.reason == "CONTEXT_OVERFLOW"
    assert len(mesh.emu.requests) == 1


async def test_anthropics_context_window_stop_is_an_overflow_not_a_truncation(mesh):
    mesh.emu.script([Reply(text="The answer is", stop="context_window")] * 3)
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent("anthropic"), input="hello"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "context_overflow"
    assert len(mesh.emu.requests) == 1  # never nudged and resent as a truncation would be


async def test_a_lone_surrogate_in_a_client_tools_arguments_leaves_the_session_usable(mesh):
    note = cpb.ToolSpec(
        name="save_note", description="Save a note", external=True,
        parameters_json_schema=json.dumps({"type": "object", "properties": {"text": {"type": "string"}}}),
    )  # fmt: skip
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("save_note", '{"text": "x\\ud99cy"}')]),
            Reply(text="saved"),
        ]
    )
    spec = agent("anthropic", tools=[pb.AgentTool(name="save_note", spec=note)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="save a note"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    call = run.pending_calls[0].call
    assert call.arguments == '{"text": "x\\ufffdy"}'
    await mesh.runs.ResumeRun(
        pb.ResumeRunRequest(
            run_id=started.run_id, results=[cpb.ToolResult(call_id=call.call_id, content="ok")]
        )
    )
    final = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert final.status == cpb.RUN_STATUS_COMPLETED, final.failure
    assert len(mesh.emu.requests) == 2  # the second request was encoded and sent once
    assert "\ufffd" in json.dumps(mesh.emu.requests[1][1], ensure_ascii=False)


async def test_tool_progress_in_the_event_log_is_capped_in_bytes(mesh):
    # 154,000 bytes of CJK are 51,333 characters: under a 64 Ki *character* cap.
    flood = "for i in $(seq 1 51334); do printf '中'; done"
    mesh.emu.script(
        [Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": flood}))]), Reply(text="ok")]
    )
    workspace = os.path.join(mesh.work, "flood")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="flood", workspace=workspace))
    events = await mesh.events(started.run_id)
    chunks = [e.tool_progressed.text for e in events if e.WhichOneof("payload") == "tool_progressed"]
    relayed = "".join(chunks)
    assert len(relayed.encode()) <= 64 * 1024
    assert "further output is in the result only" in relayed
    assert "\ufffd" not in relayed


@pytest.mark.parametrize(
    "limits",
    [
        pb.AgentLimits(time_budget={"seconds": 10, "nanos": -1}),
        pb.AgentLimits(time_budget={"seconds": 1, "nanos": 1_500_000_000}),
    ],
    ids=["mixed-signs", "nanos-range"],
)
async def test_malformed_durations_in_an_agent_are_refused(mesh, limits):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(limits=limits), input="x"))
    assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE")
    assert details_of(info.value)[1]["field"].endswith("limits.time_budget")
    tool = pb.AgentTool(name="exec_command", timeout={"seconds": 2 * 86_400})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(tools=[tool]), input="x"))
    assert reason_of(info.value) == "INVALID_VALUE" and details_of(info.value)[1]["field"].endswith("timeout")


EXTERNAL = cpb.ToolSpec(
    name="ext", description="a client tool", external=True, parameters_json_schema='{"type":"object"}'
)


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (cpb.ToolResult(content="c", status=77), "INVALID_VALUE"),
        (cpb.ToolResult(content="c", details_json="{"), "INVALID_JSON"),
        (cpb.ToolResult(content="c", nested_usage=cpb.Usage(input_tokens=-5)), "INVALID_VALUE"),
        (cpb.ToolResult(content="y" * 3_000_000), "REQUEST_TOO_LARGE"),
        (cpb.ToolResult(content="c", duration={"seconds": 1, "nanos": -4}), "INVALID_VALUE"),
    ],
    ids=["status", "details", "usage", "size", "duration"],
)
async def test_a_result_the_session_could_not_store_is_refused_and_the_run_waits(mesh, result, reason):
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("ext", "{}")]), Reply(text="fine")])
    spec = agent(tools=[pb.AgentTool(name="ext", spec=EXTERNAL)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    call_id = run.pending_calls[0].call.call_id
    result.call_id = call_id
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, results=[result]))
    assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
    still = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
    assert still.status == cpb.RUN_STATUS_SUSPENDED  # nothing changed: answer it properly
    ok = cpb.ToolResult(call_id=call_id, content="fine")
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, results=[ok]))
    done = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert done.status == cpb.RUN_STATUS_COMPLETED, done.failure


async def test_text_the_session_could_not_store_is_refused_up_front(mesh):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="x" * 3_000_000))
    assert (info.value.code(), reason_of(info.value)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "REQUEST_TOO_LARGE",
    )
    assert len(mesh.emu.requests) == 0
    mesh.emu.script([Reply(tool_calls=[ToolCallReply("ext", "{}")])])
    spec = agent(tools=[pb.AgentTool(name="ext", spec=EXTERNAL)])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="go"))
    await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.InjectInput(
            pb.InjectInputRequest(
                run_id=started.run_id, text="z" * 3_000_000, kind=pb.INJECTION_KIND_NEXT_TURN
            )
        )
    assert reason_of(info.value) == "REQUEST_TOO_LARGE"
