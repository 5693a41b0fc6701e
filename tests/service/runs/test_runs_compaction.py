"""Long conversations: compaction by the run and context-overflow recovery (issue 9; 004 §2.5f, §2.5g).

The emulator plays a model with a small context window: a `responder` answers each request
by what it holds (a summary request gets a summary; an agent request over the window gets
the provider's overflow error; otherwise the next step of the conversation), and reports
the request's counted input tokens as its usage, as a provider does. Every check reads the
emulator's request log: each request's size, and the pairing of every call with its result.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from agentrt.core.compaction import SUMMARY_INSTRUCTIONS
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb
from tests.emulators.providers import ErrorReply, Reply, ToolCallReply, count_input_tokens
from tests.service.runs.harness import agent, start_replica
from tests.service.runs.pairing import check_pairing, system_text

WINDOW = 2600
NOTE = "The quarterly figures were revised twice and the archive holds the older copies. " * 5


def _is_summary(path: str, body) -> bool:
    return SUMMARY_INSTRUCTIONS[:40] in system_text(path, body)


class Conversation:
    """The responder: `turns` tool steps (read_file), then a final answer."""

    def __init__(self, turns: int, overflow_at: tuple[int, ...] = (), overflow: str = "error") -> None:
        self.turns = turns
        self.overflow_at = set(overflow_at)
        self.overflow = overflow
        self.step = 0
        self.summaries = 0
        self.sizes: list[tuple[bool, int]] = []

    def __call__(self, path: str, body):
        tokens = count_input_tokens(path, body)
        if _is_summary(path, body):
            self.summaries += 1
            self.sizes.append((True, tokens))
            return Reply(
                text=f"Summary {self.summaries}: the agent read notes.txt repeatedly.", input_tokens=tokens
            )
        self.sizes.append((False, tokens))
        if tokens > WINDOW or self.step + 1 in self.overflow_at:
            self.overflow_at.discard(self.step + 1)
            if self.overflow == "stop":
                return Reply(text="cut", stop="context_window", input_tokens=tokens)
            return ErrorReply(status=400, kind="context_overflow")
        self.step += 1
        if self.step > self.turns:
            return Reply(text="all notes read", input_tokens=tokens)
        return Reply(
            text=f"reading again ({self.step})",
            tool_calls=[ToolCallReply("read_file", '{"path": "notes.txt"}')],
            input_tokens=tokens,
        )


def _agent(provider: str, **kw) -> pb.AgentSpec:
    return agent(
        provider,
        tools=[pb.AgentTool(name="read_file")],
        instructions="Read the notes until you have read them enough.",
        limits=pb.AgentLimits(max_turns=60),
        **kw,
    )


def _workspace(mesh, name: str) -> str:
    path = os.path.join(mesh.work, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "notes.txt"), "w") as f:
        f.write(NOTE)
    return path


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_40_turn_run_compacts_and_every_request_fits_the_window(mesh, provider):
    talk = Conversation(turns=39)
    mesh.emu.responder = talk
    policy = pb.CompactionPolicy(context_window_tokens=WINDOW, keep_turns=3, summary_max_output_tokens=200)
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=_agent(provider, compaction=policy),
            input="read the notes",
            workspace=_workspace(mesh, provider),
        )
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.turns == 40 and run.final_output == "all notes read"
    assert talk.summaries >= 2
    assert all(tokens <= WINDOW for _, tokens in talk.sizes), talk.sizes
    for path, body in mesh.emu.requests:
        check_pairing(path, body)
    log = await mesh.entries(started.session_id)
    checkpoints = [e for e in log if e.kind == "compaction"]
    assert len(checkpoints) == talk.summaries
    assert all(e.folded_entry_ids for e in checkpoints)
    assert len([e for e in log if e.item.HasField("tool_call")]) == 39  # nothing deleted
    # the next run on the session sends the same compacted view
    talk.turns, talk.step = 0, 0
    before = len(mesh.emu.requests)
    again = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=_agent(provider), input="one more thing", session_id=started.session_id)
    )
    assert (await mesh.wait_status(again.run_id, cpb.RUN_STATUS_COMPLETED)).final_output == "all notes read"
    path, body = mesh.emu.requests[before]
    assert f"Summary {talk.summaries}" in system_text(path, body)
    assert count_input_tokens(path, body) <= WINDOW
    check_pairing(path, body)


@pytest.mark.parametrize(
    ("provider", "shape"), [("openai", "error"), ("anthropic", "error"), ("anthropic", "stop")]
)
async def test_an_overflow_is_recovered_by_compaction_and_the_turn_retried_once(mesh, provider, shape):
    """An overflow at turn 6 compacts and retries the same turn; no turn is spent on it."""
    talk = Conversation(turns=6, overflow_at=(6,), overflow=shape)
    mesh.emu.responder = talk
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=_agent(provider, max_overflow_retries=1, compaction=pb.CompactionPolicy(keep_turns=2)),
            input="read the notes",
            workspace=_workspace(mesh, f"{provider}-{shape}"),
        )
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert run.overflow_retries == 1 and run.turns == 7
    assert [d.code for d in run.diagnostics if d.code == "context_overflow"] == ["context_overflow"]
    assert talk.summaries == 1
    agents = [tokens for is_summary, tokens in talk.sizes if not is_summary]
    overflowed, retried = agents[5], agents[6]
    assert retried < overflowed  # the same turn, on a strictly smaller context
    for path, body in mesh.emu.requests:
        check_pairing(path, body)
    events = await mesh.events(started.run_id)
    diagnostics = [e.diagnostic.code for e in events if e.WhichOneof("payload") == "diagnostic"]
    assert "context_overflow" in diagnostics
    assert [e for e in await mesh.entries(started.session_id) if e.kind == "compaction"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_overflow_with_nothing_to_fold_fails_after_one_attempt(mesh, provider):
    talk = Conversation(turns=3, overflow_at=(1,))
    mesh.emu.responder = talk
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=_agent(provider, max_overflow_retries=3), input="read the notes")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_COMPLETED)
    assert run.status == cpb.RUN_STATUS_FAILED
    assert run.failure.kind == "context_overflow" and run.failure.reason == "CONTEXT_OVERFLOW"
    assert run.failure.debug_message  # the provider's own words
    assert len(mesh.emu.requests) == 1 and run.overflow_retries == 0


async def test_a_truncated_response_is_never_an_overflow(mesh):
    mesh.emu.script([Reply(text="cut off", stop="max_tokens"), Reply(text="short answer")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=_agent("anthropic", max_overflow_retries=2), input="go")
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED and run.overflow_retries == 0
    assert not [e for e in await mesh.entries(started.session_id) if e.kind == "compaction"]


async def test_a_failed_compaction_pass_never_fails_the_run(mesh):
    talk = Conversation(turns=6)

    def failing_summaries(path: str, body):
        if _is_summary(path, body):
            return ErrorReply(status=400, kind="invalid_request")
        return talk(path, body)

    mesh.emu.responder = failing_summaries
    policy = pb.CompactionPolicy(trigger_turns=3, keep_turns=2)
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=_agent("openai", compaction=policy),
            input="read the notes",
            workspace=_workspace(mesh, "fail"),
        )
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    failed = [d for d in run.diagnostics if d.code == "compaction_failed"]
    assert failed and all(d.turn >= 1 for d in failed)
    events = await mesh.events(started.run_id)
    assert "compaction_failed" in {
        e.diagnostic.code for e in events if e.WhichOneof("payload") == "diagnostic"
    }
    # the diagnostic rides on a later turn's last session entry (004 §2.11d)
    log = await mesh.entries(started.session_id)
    carried = [e for e in log if "compaction_failed" in e.display.extra_json]
    assert carried and all("diagnostics" in json.loads(e.display.extra_json) for e in carried)
    assert not [e for e in log if e.kind == "compaction"]


async def test_a_compaction_policy_is_validated(mesh):
    import grpc

    bad = pb.CompactionPolicy(keep_turns=-1)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=_agent("openai", compaction=bad), input="x"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(
            pb.StartRunRequest(agent=_agent("openai", max_overflow_retries=101), input="x")
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await mesh.sessions.ListSessions(spb.ListSessionsRequest())).sessions == []


async def test_a_summary_logged_before_a_crash_is_checkpointed_not_requested_again(
    start_server, tmp_path, emulator
):
    """The owner dies between the summary and its checkpoint; the next owner appends the logged one."""

    from tests.service.runs.harness import start_mesh
    from tests.service.runs.test_runs_takeover import until

    mesh = await start_mesh(start_server, tmp_path, emulator, lease_seconds=0.6, replica_id="replica-a")
    talk = Conversation(turns=5)
    emulator.responder = talk
    manager = mesh.runs_server.manager

    def die_after_the_summary(point: str) -> None:
        if point == "after_compaction_summary":
            manager._loop_task.cancel()
            raise asyncio.CancelledError()

    manager.deps.crash = die_after_the_summary
    policy = pb.CompactionPolicy(trigger_turns=3, keep_turns=2)
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=_agent("openai", compaction=policy),
            input="read the notes",
            workspace=_workspace(mesh, "crash"),
        )
    )

    async def summarized() -> bool:
        return talk.summaries == 1 and not [t for t in manager._executors]

    await until(summarized, "replica a to die after its summary")
    replica_b, stub = await start_replica(mesh, start_server, default_model="openai:gpt-test")

    async def completed() -> bool:
        run = (await stub.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
        return run.status == cpb.RUN_STATUS_COMPLETED

    await until(completed, "replica b to finish the run")
    log = await mesh.entries(started.session_id)
    checkpoints = [e for e in log if e.kind == "compaction"]
    assert checkpoints and checkpoints[0].summary == "Summary 1: the agent read notes.txt repeatedly."
    # every summary request reached the model once; the first checkpoint is the logged one
    assert talk.summaries == len(checkpoints)
    for path, body in emulator.requests:
        check_pairing(path, body)


async def test_the_token_trigger_can_use_count_tokens(mesh):
    """With count_tokens, the next request is counted by the gateway (the provider's own count)."""
    talk = Conversation(turns=4)
    mesh.emu.responder = talk
    mesh.emu.token_count = 1_000_000  # the provider counts every request far over the trigger
    policy = pb.CompactionPolicy(context_window_tokens=100_000, keep_turns=2, count_tokens=True)
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=_agent("openai", compaction=policy),
            input="read the notes",
            workspace=_workspace(mesh, "count"),
        )
    )
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert any(path == "/v1/responses/input_tokens" for path, _ in mesh.emu.requests)
    assert talk.summaries >= 1
