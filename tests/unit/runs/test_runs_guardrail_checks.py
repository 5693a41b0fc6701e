"""The loop's guardrail rules without servers (runs/loop/phases/guardrails/checks.py, runs/events/build.py).

The two orders are driven with scripted guardrails (futures the test resolves), so what runs
when is observed, not timed.
"""

from __future__ import annotations

import asyncio
import json

from agentrt.core.guardrails import CANCELLED_TEXT, SCOPE_AGENT, SCOPE_TOOL, Decision, Result, Stage
from agentrt.runs.events import build as events
from agentrt.runs.loop import failures
from agentrt.runs.loop.phases.guardrails import checks as gc
from agentrt.runs.loop.phases.guardrails import log as gl
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

IN, OUT = pb.GUARDRAIL_STAGE_INPUT, pb.GUARDRAIL_STAGE_OUTPUT
TOOL_IN, TOOL_OUT = pb.GUARDRAIL_STAGE_TOOL_INPUT, pb.GUARDRAIL_STAGE_TOOL_OUTPUT


def g(name: str, *stages: int, mode: int = 0, replace: str = "") -> pb.Guardrail:
    rule = pb.PatternGuardrail(
        patterns=["x"], on_match=pb.GUARDRAIL_DECISION_REPLACE if replace else 0, replacement=replace
    )
    return pb.Guardrail(name=name, stages=list(stages), input_mode=mode, pattern=rule)  # type: ignore[arg-type]


def result(name: str, decision: Decision | None, stage: Stage = Stage.OUTPUT, **kw) -> Result:
    return Result(name, stage, decision, **kw)


# -- selection ----------------------------------------------------------------------------


def test_input_guardrails_split_by_mode_racing_by_default():
    spec = pb.AgentSpec(
        guardrails=[
            g("a", IN),
            g("b", IN, mode=pb.GUARDRAIL_INPUT_MODE_BLOCKING),
            g("c", IN, OUT, mode=pb.GUARDRAIL_INPUT_MODE_RACING),
            g("d", OUT),
        ]
    )
    assert [x.name for x in gc.input_checks(spec, blocking=False)] == ["a", "c"]
    assert [x.name for x in gc.input_checks(spec, blocking=True)] == ["b"]
    assert [x.name for x in gc.stage_checks(spec, Stage.OUTPUT)] == ["c", "d"]


def test_tool_stages_take_the_agents_guardrails_then_that_tools_only():
    spec = pb.AgentSpec(
        guardrails=[g("agent_in", TOOL_IN), g("agent_out", TOOL_OUT), g("final", OUT)],
        tools=[
            pb.AgentTool(name="write_file", guardrails=[g("w1", TOOL_IN), g("w2", TOOL_IN, TOOL_OUT)]),
            pb.AgentTool(name="read_file", guardrails=[g("r1", TOOL_IN)]),
        ],
    )
    picked = gc.tool_checks(spec, "write_file", Stage.TOOL_INPUT)
    assert [(x.name, scope) for x, scope in picked] == [
        ("agent_in", SCOPE_AGENT),
        ("w1", SCOPE_TOOL),
        ("w2", SCOPE_TOOL),
    ]
    assert [x.name for x, _ in gc.tool_checks(spec, "write_file", Stage.TOOL_OUTPUT)] == ["agent_out", "w2"]
    assert [x.name for x, _ in gc.tool_checks(spec, "list_files", Stage.TOOL_INPUT)] == ["agent_in"]


# -- the two orders -----------------------------------------------------------------------


class Script:
    """Guardrails whose answers the test gives: each ask waits on its own future."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.cancelled: list[str] = []
        self.answers: dict[str, asyncio.Future[gc.Consulted]] = {}

    async def ask(self, guard: pb.Guardrail, scope: str) -> gc.Consulted:
        self.asked.append(guard.name)
        future = self.answers.setdefault(guard.name, asyncio.get_running_loop().create_future())
        try:
            return await future
        except asyncio.CancelledError:
            self.cancelled.append(guard.name)
            raise

    def answer(self, name: str, decision: Decision | None, **kw) -> None:
        future = self.answers.setdefault(name, asyncio.get_running_loop().create_future())
        future.set_result(gc.Consulted(result(name, decision, **kw), 0.01))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_concurrent_stage_asks_all_at_once_and_the_first_tripwire_cancels_the_rest():
    script = Script()
    checks = [g("slow", OUT), g("trips", OUT), g("allows", OUT)]
    stage = asyncio.ensure_future(gc.run_parallel(checks, Stage.OUTPUT, script.ask))
    await settle()
    assert script.asked == ["slow", "trips", "allows"]  # all at once, none waits for another
    script.answer("allows", Decision.ALLOW)
    await settle()
    assert not stage.done()
    script.answer("trips", Decision.TRIP, message="no")
    consulted = await stage
    assert script.cancelled == ["slow"]
    by = [(c.result.guardrail, c.result.decision, c.result.error) for c in consulted]
    assert by == [
        ("slow", None, CANCELLED_TEXT),
        ("trips", Decision.TRIP, ""),
        ("allows", Decision.ALLOW, ""),
    ]
    assert gc.ending([c.result for c in consulted]).guardrail == "trips"


async def test_a_concurrent_stage_waits_for_every_answer_and_the_first_declared_replace_wins():
    script = Script()
    checks = [g("a", OUT), g("b", OUT), g("c", OUT)]
    stage = asyncio.ensure_future(gc.run_parallel(checks, Stage.OUTPUT, script.ask))
    await settle()
    script.answer("c", Decision.REPLACE, message="from c")
    script.answer("b", Decision.REPLACE, message="from b")
    await settle()
    assert not stage.done()
    script.answer("a", Decision.ALLOW)
    consulted = await stage
    results = [c.result for c in consulted]
    assert gc.ending(results) is None and gc.replacement(results).message == "from b"
    assert script.cancelled == []


async def test_an_error_ends_a_concurrent_stage_like_a_tripwire():
    script = Script()
    stage = asyncio.ensure_future(gc.run_parallel([g("a", OUT), g("b", OUT)], Stage.OUTPUT, script.ask))
    await settle()
    script.answer("b", None, error="the judge model failed: down")
    consulted = await stage
    assert gc.ending([c.result for c in consulted]).error.startswith("the judge model failed")
    assert script.cancelled == ["a"]


async def test_a_tool_stage_asks_in_order_and_stops_at_the_first_replace():
    script = Script()
    checks = [
        (g("first", TOOL_IN), SCOPE_AGENT),
        (g("second", TOOL_IN), SCOPE_TOOL),
        (g("third", TOOL_IN), SCOPE_TOOL),
    ]
    stage = asyncio.ensure_future(gc.run_sequential(checks, script.ask))
    await settle()
    assert script.asked == ["first"]  # one at a time
    script.answer("first", Decision.ALLOW)
    await settle()
    assert script.asked == ["first", "second"]
    script.answer("second", Decision.REPLACE, message="instead")
    consulted = await stage
    assert script.asked == ["first", "second"]  # the third is never consulted
    assert [c.result.guardrail for c in consulted] == ["first", "second"]
    assert gc.replacement([c.result for c in consulted]).message == "instead"


async def test_a_tool_stage_stops_at_a_tripwire_and_an_error():
    for decision, kw in ((Decision.TRIP, {}), (None, {"error": "boom"})):
        script = Script()
        checks = [(g("a", TOOL_OUT), SCOPE_AGENT), (g("b", TOOL_OUT), SCOPE_AGENT)]
        stage = asyncio.ensure_future(gc.run_sequential(checks, script.ask))
        await settle()
        script.answer("a", decision, **kw)
        consulted = await stage
        assert script.asked == ["a"] and gc.ending([c.result for c in consulted]).guardrail == "a"


async def test_consulting_a_pattern_guardrail_needs_no_peer_and_never_raises():
    replace = g("scrub", OUT, replace="[x]")
    found = await gc.consult(None, "t", "r", cpb.ModelRef(), replace, Stage.OUTPUT, "has an x")  # type: ignore[arg-type]
    assert (found.result.decision, found.result.message, found.usage) == (Decision.REPLACE, "[x]", None)
    clean = await gc.consult(None, "t", "r", cpb.ModelRef(), replace, Stage.OUTPUT, "nothing")  # type: ignore[arg-type]
    assert clean.result.decision == Decision.ALLOW
    # a judge with no gateway to ask is an error of the guardrail (fail closed), not a crash
    judge = pb.Guardrail(name="j", stages=[OUT], model=pb.ModelGuardrail(prompt="p"))
    failed = await gc.consult(None, "t", "r", cpb.ModelRef(), judge, Stage.OUTPUT, "x")  # type: ignore[arg-type]
    assert failed.result.decision is None and failed.result.error.startswith("the guardrail failed")
    assert failed.result.ends_run


# -- outcomes, the run log, events ----------------------------------------------------------


def test_the_failure_names_the_guardrail_stage_scope_and_call():
    tripped = result(
        "no_rm", Decision.TRIP, Stage.TOOL_INPUT, message="rm is not allowed", call_id="c1", scope="tool"
    )
    f = failures.guardrail_failure(tripped)
    assert f.kind == "guardrail_tripped" and "tool_input guardrail 'no_rm' tripped" in f.message
    assert json.loads(f.details_json) == {
        "guardrail": "no_rm",
        "stage": "tool_input",
        "scope": "tool",
        "call_id": "c1",
    }
    erred = failures.guardrail_failure(result("j", None, error="the judge's reply is not a verdict"))
    assert erred.kind == "guardrail_failed" and erred.debug_message.startswith("the judge's reply")


def test_a_replace_after_a_tripwire_is_no_replacement():
    results = [result("a", Decision.REPLACE, message="m"), result("b", Decision.TRIP)]
    assert gc.replacement(results) is None and gc.ending(results).guardrail == "b"
    cancelled = [result("a", None, error=CANCELLED_TEXT), result("b", Decision.ALLOW)]
    assert gc.ending(cancelled) is None  # a cancellation is the stop being honored, not an outcome


def test_the_run_log_form_round_trips():
    usage = cpb.Usage(input_tokens=7, output_tokens=3, requests=1)
    for c in (
        gc.Consulted(
            result("a", Decision.REPLACE, Stage.TOOL_OUTPUT, message="m", call_id="c", scope="tool"),
            0.25,
            usage,
        ),
        gc.Consulted(result("b", None, Stage.INPUT, error=CANCELLED_TEXT), 1.5),
    ):
        back = gl.consulted_in(json.loads(json.dumps(gl.consulted_out(c))))
        assert back == c
    assert gl.usage_in(gl.usage_out(usage)) == usage and gl.usage_in({}) == cpb.Usage()


def test_the_event_carries_every_field_of_a_result():
    usage = cpb.Usage(input_tokens=7, output_tokens=3, requests=1)
    r = result("j", Decision.TRIP, Stage.TOOL_INPUT, message="why", call_id="c", scope="tool")
    e = events.guardrail_result(r, 0.5, usage)
    assert (e.guardrail, e.stage, e.decision, e.message, e.call_id, e.scope) == (
        "j",
        TOOL_IN,
        pb.GUARDRAIL_DECISION_TRIP,
        "why",
        "c",
        "tool",
    )
    assert e.duration.ToNanoseconds() == 500_000_000 and e.usage == usage
    cancelled = events.guardrail_result(result("p", None, error=CANCELLED_TEXT), 0.0)
    assert cancelled.decision == pb.GUARDRAIL_DECISION_UNSPECIFIED and not cancelled.HasField("usage")


# -- what a Replace changes ---------------------------------------------------------------


def _message_entry(run_id: str, text: str, batch: str) -> spb.Entry:
    msg = cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
    return spb.Entry(
        kind="item",
        run_id=run_id,
        item=spb.Item(message=msg),
        display=spb.Display(extra_json=json.dumps({"batch": batch})),
    )


def test_a_racing_replace_changes_this_runs_input_in_the_view_only():
    earlier = _message_entry("run-0", "an older run's input", "input")
    mine = _message_entry("run-1", "the secret input", "input")
    injected = _message_entry("run-1", "a steer", "turn:1")
    view = [earlier, mine, injected]
    assert gc.input_view(view, "run-1", {}) is view
    out = gc.input_view(view, "run-1", {gc.INPUT_REPLACED: {"text": "[scrubbed]"}})
    assert [e.item.message.content[0].text.text for e in out] == [
        "an older run's input",
        "[scrubbed]",
        "a steer",
    ]
    assert mine.item.message.content[0].text.text == "the secret input"  # the entry itself is untouched


def test_an_output_replace_keeps_only_the_replacement_and_tool_calls():
    thinking = cpb.ContentBlock(thinking=cpb.ThinkingBlock(text="the code is 1, better not say it"))
    call = cpb.ContentBlock(tool_use=cpb.ToolCall(call_id="c", name="final_output", arguments="{}"))
    text = [
        cpb.ContentBlock(text=cpb.TextBlock(text="the code is 1")),
        cpb.ContentBlock(text=cpb.TextBlock(text="x")),
    ]
    response = cpb.ModelResponse(content=[thinking, *text, call], response_id="r1")
    out = gc.replaced_response(response, "I cannot say.")
    assert [b.WhichOneof("block") for b in out.content] == ["tool_use", "text"]
    assert out.content[1].text.text == "I cannot say." and out.response_id == "r1"
    assert len(response.content) == 4  # the response itself is untouched


def test_an_output_replace_of_the_final_output_tool_replaces_its_arguments_only():
    from agentrt.core.decide import Call

    calls = (Call(0, "c0", "read_file", '{"path": "a"}'), Call(1, "c1", "final_output", '{"code": 4711}'))
    out = gc.replaced_calls(calls, "withheld")
    assert out[0] == calls[0] and json.loads(out[1].arguments) == {"output": "withheld"}
    assert (out[1].call_id, out[1].name) == ("c1", "final_output")
    call = cpb.ContentBlock(
        tool_use=cpb.ToolCall(call_id="c1", name="final_output", arguments='{"code": 4711}')
    )
    only_tool = gc.replaced_response(cpb.ModelResponse(content=[call]), "withheld")
    assert [b.WhichOneof("block") for b in only_tool.content] == ["tool_use"]  # no text gained


def test_tool_stages_inspect_calls_that_would_run_and_results_that_came_from_a_tool_or_client():
    from agentrt.core.decide import Call
    from agentrt.runs.loop.phases.tools import Planned, runtime_result

    spec = pb.AgentSpec(
        guardrails=[g("in", TOOL_IN), g("out", TOOL_OUT)],
        tools=[pb.AgentTool(name="a"), pb.AgentTool(name="client")],
    )
    external = cpb.ToolSpec(name="client", external=True)
    calls = [Call(i, f"c{i}", "client" if i >= 3 else "a", "{}") for i in range(5)]
    planned = [
        Planned(calls[0], cpb.ToolSpec(name="a")),  # runs
        Planned(calls[1], cpb.ToolSpec(name="a"), pending=pb.PENDING_CALL_KIND_APPROVAL),  # waits
        Planned(calls[2], None, result=runtime_result(calls[2], "Tool 'a' not found.", 2)),  # the runtime's
        Planned(calls[3], external, result=cpb.ToolResult(call_id="c3", content="from the client")),
        Planned(calls[4], external, pending=pb.PENDING_CALL_KIND_EXTERNAL_RESULT),  # waits for the client
    ]
    assert gc.tool_subjects(planned, spec, Stage.TOOL_INPUT) == [0, 1, 4]
    assert gc.tool_subjects(planned, spec, Stage.TOOL_OUTPUT) == [0, 3]
    assert gc.tool_subjects(planned, pb.AgentSpec(tools=spec.tools), Stage.TOOL_INPUT) == []  # none declared


# -- the judge call's key (decision 0019) -------------------------------------------------


def test_a_judge_call_key_names_run_decision_and_guardrail_and_stays_within_the_gateways_rules():
    from agentrt.runs.loop.phases.model import judge_call_key

    log_key = gl.key_of(Stage.TOOL_INPUT, 3, "call_1")
    key = judge_call_key("run-1", log_key, SCOPE_TOOL, 1, "cmd_check")
    assert key == "run-1/guardrail-tool_input:3:call_1:/tool-1-cmd_check"
    assert key == judge_call_key("run-1", log_key, SCOPE_TOOL, 1, "cmd_check")  # any replica
    others = {
        judge_call_key("run-2", log_key, SCOPE_TOOL, 1, "cmd_check"),
        judge_call_key("run-1", gl.key_of(Stage.TOOL_INPUT, 4, "call_1"), SCOPE_TOOL, 1, "cmd_check"),
        judge_call_key("run-1", gl.key_of(Stage.TOOL_INPUT, 3, "call_2"), SCOPE_TOOL, 1, "cmd_check"),
        judge_call_key("run-1", gl.key_of(Stage.TOOL_OUTPUT, 3, "call_1"), SCOPE_TOOL, 1, "cmd_check"),
        judge_call_key("run-1", log_key, SCOPE_AGENT, 1, "cmd_check"),
        judge_call_key("run-1", log_key, SCOPE_TOOL, 0, "cmd_check"),
        judge_call_key("run-1", log_key, SCOPE_TOOL, 1, "other"),
        judge_call_key("run-1", gl.key_of(Stage.INPUT, 1, mode="racing"), SCOPE_AGENT, 0, "cmd_check"),
        judge_call_key("run-1", gl.key_of(Stage.INPUT, 1, mode="blocking"), SCOPE_AGENT, 0, "cmd_check"),
    }
    assert key not in others and len(others) == 9
    long = judge_call_key("run-1", gl.key_of(Stage.TOOL_OUTPUT, 1, "c" * 300), SCOPE_AGENT, 0, "g\tx")
    assert len(long) <= 256 and long.startswith("run-1/guardrail-") and long.isprintable()
    assert long == judge_call_key("run-1", gl.key_of(Stage.TOOL_OUTPUT, 1, "c" * 300), SCOPE_AGENT, 0, "g\tx")
