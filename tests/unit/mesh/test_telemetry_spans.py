"""The domain span API (004 §2.11e) with the SDK's in-memory exporter: shape, attributes,
content only when opted in, usable no-op handles without tracing, the run/turn context."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from agentrt.mesh import telemetry
from agentrt.mesh.telemetry import tracing
from agentrt.mesh.telemetry.handles import CONTENT_MAX_CHARS
from tests.tracing import recorded


def _parent(span) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_turn_nests_generation_and_tool_call_under_run_and_ids_are_recorded():
    with recorded() as rec:
        with telemetry.run_span("run-1", agent="helper", session_id="sess-1", tenant="acme"):
            with telemetry.turn_span(1):
                with telemetry.generation_span(provider="openai", model="gpt-4.1") as gen:
                    gen.set_response(
                        response_id="resp_9",
                        model="gpt-4.1-2025",
                        input_tokens=120,
                        output_tokens=30,
                        cached_input_tokens=40,
                        reasoning_tokens=7,
                        finish_reasons=["tool_calls"],
                    )
                with telemetry.tool_call_span("exec_command", "call_1") as call:
                    with telemetry.sandbox_command_span(backend="bwrap", call_id="call_1") as cmd:
                        cmd.set_exit(exit_code=0, output_bytes=12)
                    call.set_result(is_error=False, outcome="ok")
    run = rec.named("invoke_agent helper")
    turn = rec.named("turn 1")
    gen = rec.named("chat gpt-4.1")
    tool = rec.named("execute_tool exec_command")
    cmd = rec.named("sandbox command")
    assert _parent(run) is None
    assert _parent(turn) == run.context.span_id
    assert _parent(gen) == turn.context.span_id and _parent(tool) == turn.context.span_id
    assert _parent(cmd) == tool.context.span_id
    assert len({s.context.trace_id for s in rec.spans}) == 1
    assert all(s.kind == SpanKind.INTERNAL for s in rec.spans)
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "helper"
    assert run.attributes["gen_ai.conversation.id"] == "sess-1"
    assert run.attributes["agentrt.run.id"] == "run-1" and run.attributes["agentrt.tenant"] == "acme"
    assert turn.attributes["agentrt.turn"] == 1 and turn.attributes["agentrt.run.id"] == "run-1"
    assert dict(gen.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1",
        "agentrt.run.id": "run-1",
        "agentrt.turn": 1,
        "gen_ai.response.id": "resp_9",
        "gen_ai.response.model": "gpt-4.1-2025",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 40,
        "gen_ai.usage.reasoning.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.attributes["gen_ai.tool.name"] == "exec_command"
    assert (
        tool.attributes["agentrt.tool.outcome"] == "ok" and tool.attributes["agentrt.tool.is_error"] is False
    )
    assert cmd.attributes["process.exit.code"] == 0 and cmd.attributes["agentrt.sandbox.backend"] == "bwrap"
    assert cmd.attributes["gen_ai.tool.call.id"] == "call_1"


def test_content_is_dropped_unless_opted_in_and_ids_stay():
    for opted_in in (False, True):
        with recorded(content=opted_in) as rec:
            with telemetry.tool_call_span("write_file", "call_7") as call:
                call.set_content("gen_ai.tool.call.arguments", '{"path": "secret.txt"}')
            with telemetry.generation_span(provider="anthropic", model="claude") as gen:
                gen.set_content("gen_ai.input.messages", "the user's words")
        tool, gen_span = rec.named("execute_tool write_file"), rec.named("chat claude")
        assert tool.attributes["gen_ai.tool.call.id"] == "call_7"
        assert ("gen_ai.tool.call.arguments" in tool.attributes) is opted_in
        assert ("gen_ai.input.messages" in gen_span.attributes) is opted_in
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"path": "secret.txt"}'


def test_long_content_is_cut_with_a_marker():
    with recorded(content=True) as rec:
        with telemetry.generation_span(provider="openai", model="m") as gen:
            gen.set_content("gen_ai.output.messages", "x" * (CONTENT_MAX_CHARS + 10))
    value = rec.named("chat m").attributes["gen_ai.output.messages"]
    assert value.startswith("x" * CONTENT_MAX_CHARS) and value.endswith("…[10 more characters]")


def test_without_tracing_handles_are_usable_and_record_nothing():
    assert not telemetry.tracing_enabled()
    with telemetry.run_span("run-2", agent="a") as run:
        assert not run.recording
        with telemetry.generation_span(provider="openai", model="m") as gen:
            gen.set_response(response_id="r", input_tokens=1)
            gen.set_content("gen_ai.input.messages", "words")
            gen.event("anything")
            gen.fail("rate_limited")
            telemetry.record_model_retry(attempt=1, reason="rate_limited", delay_seconds=0.5)
        assert telemetry.current_run_id() == "run-2"
        assert telemetry.traceparent() == ""
    assert telemetry.current_run_id() == ""


def test_writes_after_the_span_ended_are_ignored():
    with recorded() as rec:
        with telemetry.generation_span(provider="openai", model="m") as gen:
            pass
        gen.set_response(response_id="late", input_tokens=5)
        gen.fail("late")
        assert not gen.recording
    span = rec.named("chat m")
    assert "gen_ai.response.id" not in span.attributes and span.status.status_code == StatusCode.UNSET


def test_a_model_retry_is_a_zero_duration_event_on_the_span_that_retried():
    with recorded() as rec:
        with telemetry.generation_span(provider="openai", model="m"):
            telemetry.record_model_retry(attempt=1, reason="rate_limited", delay_seconds=0.25)
            telemetry.record_model_retry(attempt=2, reason="unavailable", delay_seconds=0.5)
    span = rec.named("chat m")
    assert [e.name for e in span.events] == ["model_retry", "model_retry"]
    first = span.events[0].attributes
    assert (first["agentrt.retry.attempt"], first["error.type"], first["agentrt.retry.delay_seconds"]) == (
        1,
        "rate_limited",
        0.25,
    )
    assert len(rec.spans) == 1  # a marker, not a wrapper


def test_an_exception_marks_the_span_failed_a_cancellation_does_not():
    with recorded() as rec:
        with pytest.raises(RuntimeError), telemetry.turn_span(3):
            raise RuntimeError("boom")

        async def canceled() -> None:
            with telemetry.turn_span(4):
                await asyncio.sleep(3600)

        async def main() -> None:
            task = asyncio.ensure_future(canceled())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
    failed, stopped = rec.named("turn 3"), rec.named("turn 4")
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["error.type"] == "RuntimeError"
    assert stopped.status.status_code == StatusCode.UNSET and [e.name for e in stopped.events] == ["canceled"]


def test_fail_names_the_error_type():
    with recorded() as rec:
        with telemetry.run_span("r", agent="a") as run:
            run.fail("max_turns", "the run reached max_turns")
    span = rec.named("invoke_agent a")
    assert (
        span.status.status_code == StatusCode.ERROR and span.status.description == "the run reached max_turns"
    )
    assert span.attributes["error.type"] == "max_turns"


def test_a_resumed_run_continues_the_stored_trace_and_links_the_current_span():
    with recorded() as rec:
        with telemetry.run_span("run-3", agent="a"):
            stored = telemetry.traceparent()
        assert stored.startswith("00-") and len(stored.split("-")) == 4
        tracer = tracing.tracer()
        assert tracer is not None
        with tracer.start_as_current_span("ResumeRun"), telemetry.run_span("run-3", agent="a", parent=stored):
            pass
    first, second = [s for s in rec.spans if s.name == "invoke_agent a"]
    resume = rec.named("ResumeRun")
    assert second.context.trace_id == first.context.trace_id != resume.context.trace_id
    assert _parent(second) == first.context.span_id
    assert [link.context.span_id for link in second.links] == [resume.context.span_id]


def test_a_malformed_stored_traceparent_starts_a_fresh_trace():
    assert telemetry.remote_parent("not-a-traceparent") is None
    with recorded() as rec:
        with telemetry.run_span("run-4", agent="a", parent="00-zz-yy-01"):
            pass
    assert _parent(rec.named("invoke_agent a")) is None


def test_run_and_turn_context_is_set_for_the_body_and_restored():
    with telemetry.run_span("outer", agent="a"):
        with telemetry.turn_span(2):
            assert (telemetry.current_run_id(), telemetry.current_turn()) == ("outer", 2)
            with telemetry.bind_run("other", 5):
                assert (telemetry.current_run_id(), telemetry.current_turn()) == ("other", 5)
            assert (telemetry.current_run_id(), telemetry.current_turn()) == ("outer", 2)
        assert telemetry.current_turn() == 0
    assert telemetry.current_run_id() == ""


def test_guardrail_handoff_and_compaction_spans():
    with recorded() as rec:
        with telemetry.run_span("r", agent="triage"):
            with telemetry.guardrail_span("no_secrets", kind="input") as guard:
                guard.set("agentrt.guardrail.tripped", True)
            with telemetry.handoff_span("triage", "billing", call_id="call_h"):
                pass
            with telemetry.compaction_span("sess-9", entries_before=40) as compaction:
                compaction.set("agentrt.compaction.entries_after", 6)
    run = rec.named("invoke_agent triage")
    guard, handoff, compaction = (
        rec.named("guardrail no_secrets"),
        rec.named("handoff billing"),
        rec.named("compaction"),
    )
    assert {_parent(guard), _parent(handoff), _parent(compaction)} == {run.context.span_id}
    assert guard.attributes["agentrt.guardrail.tripped"] is True and guard.attributes["agentrt.run.id"] == "r"
    assert handoff.attributes["agentrt.handoff.to_agent"] == "billing"
    assert handoff.attributes["gen_ai.tool.call.id"] == "call_h"
    assert compaction.attributes["gen_ai.conversation.id"] == "sess-9"
    assert compaction.attributes["agentrt.compaction.entries_after"] == 6
