"""Defects found by a third breaker attacking issue 11 (guardrails, agents as tools, run sandboxes).

Each failed before its fix (or is marked xfail, strict, with what is wrong).
"""

from __future__ import annotations

import json

import grpc
import pytest

from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent
from tests.service.runs.sandbox_helpers import docker_mesh  # noqa: F401 - the fixture

DONE = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)
IN = pb.GUARDRAIL_STAGE_INPUT


def pattern(name: str, *patterns: str, stages=(IN,), **kw) -> pb.Guardrail:
    return pb.Guardrail(
        name=name, stages=list(stages), pattern=pb.PatternGuardrail(patterns=list(patterns)), **kw
    )


async def test_catastrophic_backtracking_pattern_fails_closed_not_hangs(mesh):
    mesh.emu.script([Reply(text="never")])
    spec = agent(
        tools=[], guardrails=[pattern("evil", r"(a+)+$", input_mode=pb.GUARDRAIL_INPUT_MODE_BLOCKING)]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="a" * 5000 + "b"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_FAILED, run
    assert run.failure.kind in ("guardrail_failed",), run.failure
    assert not [b for p, b in mesh.emu.requests if p.endswith("/responses")]


@pytest.mark.parametrize(
    "bad",
    [
        pattern("x", "("),
        pattern("x", "a" * 5000),
        pattern("x", *["a"] * 300),
        pb.Guardrail(name="x", stages=[], pattern=pb.PatternGuardrail(patterns=["a"])),
        pb.Guardrail(name="x", stages=[IN, IN], pattern=pb.PatternGuardrail(patterns=["a"])),
        pb.Guardrail(name="x", stages=[99], pattern=pb.PatternGuardrail(patterns=["a"])),
        pb.Guardrail(name="", stages=[IN], pattern=pb.PatternGuardrail(patterns=["a"])),
        pb.Guardrail(name="x", stages=[IN]),
        pb.Guardrail(name="x", stages=[IN], model=pb.ModelGuardrail(prompt="")),
        pb.Guardrail(name="x", stages=[IN], model=pb.ModelGuardrail(prompt="p", max_output_tokens=-1)),
        pb.Guardrail(
            name="x",
            stages=[IN],
            model=pb.ModelGuardrail(prompt="p", model=cpb.ModelRef(provider="nope", model="m")),
        ),
    ],
)
async def test_bad_guardrails_are_refused_clearly(mesh, bad):
    mesh.emu.script([Reply(text="ok")])
    for call in ("start", "register"):
        try:
            if call == "start":
                await mesh.runs.StartRun(
                    pb.StartRunRequest(agent=agent(tools=[], guardrails=[bad]), input="hi")
                )
            else:
                await mesh.runs.RegisterAgent(
                    pb.RegisterAgentRequest(agent=agent(name="g", tools=[], guardrails=[bad]))
                )
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (exc.code(), exc.details())
            assert reason_of(exc), exc.details()
        else:
            pytest.fail(f"{call} accepted {bad}")
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


@pytest.mark.parametrize("text", ["a{1000000}", "((((((((((a)))))))))){2000}", "(?i)" * 1000, "(x+x+)+y"])
async def test_odd_but_valid_patterns_decide_or_fail_closed(mesh, text):
    mesh.emu.script([Reply(text="fine")])
    spec = agent(tools=[], guardrails=[pattern("odd", text, stages=(IN, pb.GUARDRAIL_STAGE_OUTPUT))])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="x" * 20000))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED or run.failure.kind in (
        "guardrail_failed",
        "guardrail_tripped",
    ), run.failure
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs  # still serving


async def test_duplicate_guardrail_names(mesh):
    spec = agent(tools=[], guardrails=[pattern("x", "a"), pattern("x", "b")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=spec, input="hi"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_model_guardrail_naming_a_model_that_does_not_exist_fails_the_run_clearly(mesh):
    judge = pb.Guardrail(
        name="judge",
        stages=[IN],
        input_mode=pb.GUARDRAIL_INPUT_MODE_BLOCKING,
        model=pb.ModelGuardrail(prompt="judge", model=cpb.ModelRef(provider="local", model="no-such-model")),
    )
    mesh.emu.script([Reply(text="never")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(tools=[], guardrails=[judge]), input="hi")
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_FAILED, run
    assert run.failure.kind == "guardrail_failed", run.failure


@pytest.mark.postgres
@pytest.mark.parametrize("where", ["pattern", "prompt", "replacement"])
async def test_a_guardrail_with_a_nul_character_is_not_an_internal_error_on_postgres(pg_mesh, where):
    mesh = pg_mesh
    if where == "pattern":
        g = pattern("x", "zz\x00")
    elif where == "prompt":
        g = pb.Guardrail(
            name="x", stages=[pb.GUARDRAIL_STAGE_OUTPUT], model=pb.ModelGuardrail(prompt="a\x00b")
        )
    else:
        g = pb.Guardrail(
            name="x",
            stages=[IN],
            pattern=pb.PatternGuardrail(
                patterns=["h"], on_match=pb.GUARDRAIL_DECISION_REPLACE, replacement="r\x00r"
            ),
        )
    for call in ("register", "start"):
        try:
            if call == "start":
                mesh.emu.script(
                    [Reply(text="ok"), Reply(text=json.dumps({"decision": "allow", "message": ""}))]
                )
                started = await mesh.runs.StartRun(
                    pb.StartRunRequest(agent=agent(tools=[], guardrails=[g]), input="hi")
                )
                run = await mesh.wait_status(started.run_id, *DONE)
                assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
            else:
                await mesh.runs.RegisterAgent(
                    pb.RegisterAgentRequest(agent=agent(name="g", tools=[], guardrails=[g]))
                )
        except grpc.aio.AioRpcError as exc:
            assert (exc.code(), reason_of(exc)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"), (
                exc.details()
            )


@pytest.fixture
async def pg_mesh(start_server, tmp_path, emulator):
    from tests.service.runs.harness import start_mesh

    return await start_mesh(start_server, tmp_path, emulator, pg=True)


async def test_an_agent_calling_itself_as_a_tool_is_bounded_in_depth(mesh):
    from agentrt.runs.loop.phases import child as child_phase

    # (getattr: before the fix there was no bound, and the run tree grew past it)
    max_depth = getattr(child_phase, "MAX_CHILD_DEPTH", 8)
    looper = agent(name="looper", tools=[])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=looper))
    looper = agent(name="looper", tools=[pb.AgentTool(name="ask_me", agent_name="looper")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=looper))
    levels = max_depth + 1  # the top run and its max_depth nested children
    again = ToolCallReply("ask_me", json.dumps({"input": "again"}))
    # every run asks itself again; one more level than allowed would take the script further
    mesh.emu.script(
        [Reply(tool_calls=[again]) for _ in range(levels)]
        + [Reply(text=f"up {i}") for i in range(levels + 2)]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="looper", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    runs = (await mesh.runs.ListRuns(pb.ListRunsRequest(page_size=100))).runs
    assert len(runs) == levels, [r.run_id for r in runs]
    deepest = [r for r in runs if r.run_id != started.run_id and not r.child_run_ids]
    assert len(deepest) == 1
    entries = await mesh.entries(deepest[0].session_id)
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert len(results) == 1 and "deep" in results[0].content, results


BIG = 2**63 - 1


@pytest.mark.parametrize(
    "limits",
    [
        dict(cpu_seconds=BIG),
        dict(memory_bytes=BIG),
        dict(file_size_bytes=BIG),
        dict(open_files=BIG),
        dict(open_files=10**9),
        dict(memory_bytes=1),
    ],
)
async def test_extreme_sandbox_limits_are_refused_or_honored_never_internal(mesh, limits):
    from tests.service.runs.sandbox_helpers import LOCAL, sh

    mesh.emu.script([Reply(tool_calls=[sh("echo hi")]), Reply(text="done")])
    box = pb.RunSandbox(backend=LOCAL, limits=tpb.SandboxLimits(**limits))
    try:
        started = await mesh.runs.StartRun(
            pb.StartRunRequest(
                agent=agent(tools=[pb.AgentTool(name="exec_command")]), input="go", sandbox=box
            )
        )
    except grpc.aio.AioRpcError as exc:
        assert (exc.code(), reason_of(exc)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"), (
            exc.details()
        )
        assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []
        return
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.failure.kind not in ("internal", "unknown"), run.failure
    entries = await mesh.entries(started.session_id)
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert (
        results and "Traceback" not in results[0].content and "internal" not in results[0].content.lower()
    ), results


async def test_sandbox_env_with_control_characters_and_a_large_value_reaches_the_command(mesh):
    from tests.service.runs.sandbox_helpers import LOCAL, sh

    env = {"CTRL": "a\nb\x1b[31m\x07\tc", "BIG": "x" * 60000}
    mesh.emu.script(
        [Reply(tool_calls=[sh('printf %s "$CTRL" | od -c | head -2; echo ${#BIG}')]), Reply(text="done")]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=LOCAL, env=env),
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    entries = await mesh.entries(started.session_id)
    (result,) = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert "60000" in result.content, result.content


async def _suspended_child(mesh, workspace: str, extra: list[Reply]):

    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("ask_helper", json.dumps({"input": "append"}))]),
            Reply(tool_calls=[ToolCallReply("exec_command", json.dumps({"cmd": "echo two >> l.txt"}))]),
            *extra,
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))
    run = await mesh.wait_status(started.run_id, cpb.RUN_STATUS_SUSPENDED, *DONE)
    assert run.status == cpb.RUN_STATUS_SUSPENDED, run.failure
    child_id = run.pending_calls[0].run_id
    child = await mesh.wait_status(child_id, cpb.RUN_STATUS_SUSPENDED)
    return started, run, child


async def _register_boss(mesh) -> None:
    helper = agent(name="helper", tools=[pb.AgentTool(name="exec_command", needs_approval=True)])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    boss = agent(name="boss", tools=[pb.AgentTool(name="ask_helper", agent_name="helper")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))


@pytest.mark.parametrize("answers", [(True, True), (True, False), (False, True)])
async def test_answers_on_parent_and_child_at_once_run_the_call_at_most_once(store_mesh, answers):
    import asyncio
    import os

    mesh = store_mesh
    await _register_boss(mesh)
    for i in range(3):
        workspace = os.path.join(mesh.work, f"both-{i}")
        before = len(mesh.emu.requests)
        started, run, child = await _suspended_child(
            mesh, workspace, [Reply(text="child done"), Reply(text="parent done")]
        )
        call_id = child.pending_calls[0].call.call_id
        on_parent = pb.ResumeRunRequest(
            run_id=started.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=answers[0])]
        )
        on_child = pb.ResumeRunRequest(
            run_id=child.run_id, decisions=[pb.ApprovalDecision(call_id=call_id, approved=answers[1])]
        )
        outcomes = await asyncio.gather(
            mesh.runs.ResumeRun(on_parent), mesh.runs.ResumeRun(on_child), return_exceptions=True
        )
        for o in outcomes:
            if isinstance(o, BaseException):
                assert isinstance(o, grpc.aio.AioRpcError), o
                assert o.code() == grpc.StatusCode.FAILED_PRECONDITION, (o.code(), o.details())
        assert any(not isinstance(o, BaseException) for o in outcomes), outcomes
        final = await mesh.wait_status(started.run_id, *DONE)
        assert final.status == cpb.RUN_STATUS_COMPLETED, final.failure
        kid = await mesh.wait_status(child.run_id, *DONE)
        assert kid.status == cpb.RUN_STATUS_COMPLETED, kid.failure
        path = os.path.join(workspace, "l.txt")
        written = open(path).read() if os.path.exists(path) else ""
        assert written in ("", "two\n"), written  # never twice
        assert len(mesh.emu.requests) - before == 4  # no model call twice


async def test_canceling_the_parent_while_the_child_is_approved_leaves_nothing_running(store_mesh):
    import asyncio
    import os

    mesh = store_mesh
    await _register_boss(mesh)
    for i in range(4):
        workspace = os.path.join(mesh.work, f"race-{i}")
        started, run, child = await _suspended_child(
            mesh, workspace, [Reply(text="child done"), Reply(text="parent done")]
        )
        call_id = child.pending_calls[0].call.call_id
        target = started.run_id if i % 2 else child.run_id
        approve = pb.ResumeRunRequest(
            run_id=target, decisions=[pb.ApprovalDecision(call_id=call_id, approved=True)]
        )
        cancel = pb.CancelRunRequest(run_id=started.run_id, reason="race")
        outcomes = await asyncio.gather(
            mesh.runs.ResumeRun(approve), mesh.runs.CancelRun(cancel), return_exceptions=True
        )
        for o in outcomes:
            if isinstance(o, BaseException):
                assert isinstance(o, grpc.aio.AioRpcError), o
                assert o.code() == grpc.StatusCode.FAILED_PRECONDITION, (o.code(), o.details())
        final = await mesh.wait_status(started.run_id, *DONE)
        kid = await mesh.wait_status(child.run_id, *DONE)
        assert final.status in (cpb.RUN_STATUS_CANCELED, cpb.RUN_STATUS_COMPLETED), final
        assert kid.status in (cpb.RUN_STATUS_CANCELED, cpb.RUN_STATUS_COMPLETED), kid
        path = os.path.join(workspace, "l.txt")
        written = open(path).read() if os.path.exists(path) else ""
        assert written in ("", "two\n"), written
        # drain what the emulator was scripted with but never asked, for the next round
        with mesh.emu._lock:
            mesh.emu._script.clear()


TOOL_IN, TOOL_OUT = pb.GUARDRAIL_STAGE_TOOL_INPUT, pb.GUARDRAIL_STAGE_TOOL_OUTPUT


@pytest.mark.parametrize("decision", [pb.GUARDRAIL_DECISION_TRIP, pb.GUARDRAIL_DECISION_REPLACE])
async def test_a_tool_input_guardrail_on_an_agent_tool_starts_no_child(mesh, decision):
    helper = agent(name="helper", tools=[])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    rule = pb.PatternGuardrail(patterns=["secret"], on_match=decision)
    if decision == pb.GUARDRAIL_DECISION_REPLACE:
        rule.replacement = "withheld"
    g = pb.Guardrail(name="nosecret", stages=[TOOL_IN], pattern=rule)
    boss = agent(name="boss", tools=[pb.AgentTool(name="ask_helper", agent_name="helper", guardrails=[g])])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("ask_helper", json.dumps({"input": "the secret"}))]),
            Reply(text="boss done"),
            Reply(text="child would answer"),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    runs = (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs
    assert [r.run_id for r in runs] == [started.run_id], "a child started"
    assert not run.child_run_ids
    if decision == pb.GUARDRAIL_DECISION_TRIP:
        assert run.failure.kind == "guardrail_tripped", run.failure
        assert len(mesh.emu.requests) == 1
    else:
        assert run.status == cpb.RUN_STATUS_COMPLETED and run.final_output == "boss done", run.failure
        entries = await mesh.entries(started.session_id)
        (result,) = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
        assert result.content == "withheld"


async def test_a_tool_output_replace_of_a_childs_answer_keeps_its_usage(mesh):
    helper = agent(name="helper", tools=[])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    rule = pb.PatternGuardrail(
        patterns=["password"], on_match=pb.GUARDRAIL_DECISION_REPLACE, replacement="[redacted]"
    )
    g = pb.Guardrail(name="redact", stages=[TOOL_OUT], pattern=rule)
    boss = agent(name="boss", tools=[pb.AgentTool(name="ask_helper", agent_name="helper", guardrails=[g])])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))
    mesh.emu.script(
        [
            Reply(
                tool_calls=[ToolCallReply("ask_helper", json.dumps({"input": "tell"}))],
                input_tokens=10,
                output_tokens=1,
            ),
            Reply(text="the password is hunter2", input_tokens=20, output_tokens=2),
            Reply(text="boss done", input_tokens=30, output_tokens=3),
        ]
    )
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    entries = await mesh.entries(started.session_id)
    (result,) = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert result.content == "[redacted]"
    assert "hunter2" not in str(await mesh.events(started.run_id))
    assert (run.usage.input_tokens, run.usage.requests) == (60, 3), run.usage
    assert run.nested_usage.input_tokens == 20


async def test_agentrt_run_live_view_of_a_child_with_an_approval_at_80_columns(mesh, capsys, monkeypatch):
    import asyncio
    import os

    from rich.cells import cell_len

    from agentrt.cli.main import main
    from agentrt.cli.render import visible

    await _register_boss(mesh)
    wide = "写" * 50
    esc = "\x1b[2J\x1b]0;pwned\x07"
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("ask_helper", json.dumps({"input": f"append {wide} {esc}"}))]),
            Reply(
                tool_calls=[
                    ToolCallReply("exec_command", json.dumps({"cmd": f"echo '{wide}{esc}' >> l.txt"}))
                ]
            ),
            Reply(text=f"child done {wide} {esc}"),
            Reply(text=f"parent done {wide} {esc}"),
        ]
    )
    monkeypatch.setenv("COLUMNS", "80")
    workspace = os.path.join(mesh.work, "live")
    code = await asyncio.to_thread(
        main,
        [
            "run",
            "go",
            "--agent",
            "boss",
            "--approve-all",
            "--workspace",
            workspace,
            "--runs-addr",
            mesh.runs_address,
        ],
    )
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert code == 0, (out.out, out.err)
    assert any("parent done" in line for line in lines), lines
    # Streamed model text (the child's and the parent's) is printed delta by delta and left to
    # the terminal to wrap; another event between two deltas (the two runs' events interleave)
    # puts the rest of the text on a line of its own, so any piece of it is exempt.
    streamed = [visible(f"{who} done {wide} {esc}") for who in ("child", "parent")]
    too_wide = [
        x
        for x in lines
        if cell_len(x) > 80 and len(x.split()) > 1 and not any(x.strip() in text for text in streamed)
    ]
    assert not too_wide, too_wide
    # what the model wrote cannot drive the terminal (clear the screen, set its title)
    assert "\x1b[2J" not in out.out and "\x1b]0;" not in out.out, [line for line in lines if "\x1b" in line]
    assert open(os.path.join(workspace, "l.txt")).read().count("\n") == 1


@pytest.mark.parametrize(
    "arguments",
    ['{"cmd": "echo [/x]"}', '{"cmd": "[conceal]rm -rf ~[/conceal] ls"}', '{"cmd": "rm -rf ~\\r\x1b[2Kls"}'],
)
async def test_the_approval_question_shows_the_calls_arguments_as_they_are(monkeypatch, arguments):
    """A call's arguments are the model's: they must not be read as markup or drive the terminal."""
    import builtins
    import io

    from rich.console import Console

    from agentrt.cli.follow import terminal_approver

    asked: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda *a: asked.append("asked") or "n")
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80, color_system="standard")
    decide = terminal_approver(console, approve_all=False, interactive=True)
    call = cpb.ToolCall(call_id="c1", name="exec_command", arguments=arguments.replace("\\r", "\r"))
    approved, _ = await decide(call)
    assert approved is False and asked == ["asked"]
    shown = buf.getvalue()
    plain = __import__("re").sub(r"\x1b\[[0-9;]*m", "", shown)  # the console's own colors
    assert "\x1b[2K" not in plain and "\r" not in plain, repr(shown)
    assert "\x1b[8m" not in shown, repr(shown)  # nothing concealed
    for word in ("rm -rf ~" if "rm" in arguments else "[/x]",):
        assert word in plain, repr(shown)


@pytest.mark.parametrize("bad", ["unknown_call", "duplicate", "result_for_approval"])
async def test_a_bad_resume_through_the_parent_changes_nothing_in_the_child(mesh, bad):
    import os

    await _register_boss(mesh)
    workspace = os.path.join(mesh.work, f"bad-{bad}")
    started, run, child = await _suspended_child(
        mesh, workspace, [Reply(text="child done"), Reply(text="parent done")]
    )
    call_id = child.pending_calls[0].call.call_id
    good = pb.ApprovalDecision(call_id=call_id, approved=True)
    req = pb.ResumeRunRequest(run_id=started.run_id, decisions=[good])
    if bad == "unknown_call":
        req.decisions.append(pb.ApprovalDecision(call_id="call_nope", approved=True))
    elif bad == "duplicate":
        req.decisions.append(pb.ApprovalDecision(call_id=call_id, approved=False))
    else:
        req.results.append(cpb.ToolResult(call_id=call_id, name="exec_command", content="fake"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.ResumeRun(req)
    assert info.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION), (
        info.value.code(),
        info.value.details(),
    )
    assert reason_of(info.value), info.value.details()
    # nothing changed: both still wait, the command has not run
    assert (
        await mesh.runs.GetRun(pb.GetRunRequest(run_id=child.run_id))
    ).run.status == cpb.RUN_STATUS_SUSPENDED
    assert (
        await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))
    ).run.status == cpb.RUN_STATUS_SUSPENDED
    assert not os.path.exists(os.path.join(workspace, "l.txt"))
    # and the good answer still works
    await mesh.runs.ResumeRun(pb.ResumeRunRequest(run_id=started.run_id, decisions=[good]))
    final = await mesh.wait_status(started.run_id, *DONE)
    assert final.status == cpb.RUN_STATUS_COMPLETED, final.failure
    assert open(os.path.join(workspace, "l.txt")).read() == "two\n"


async def test_many_concurrent_sandboxed_runs_complete_and_release_their_sandboxes(mesh):
    import asyncio

    from tests.service.runs.sandbox_helpers import LOCAL, released, sh

    n = 12
    mesh.emu.script(
        [Reply(tool_calls=[sh("echo $N")]) for _ in range(n)] + [Reply(text="done") for _ in range(n)]
    )
    spec = agent(tools=[pb.AgentTool(name="exec_command")])
    starts = await asyncio.gather(
        *[
            mesh.runs.StartRun(
                pb.StartRunRequest(
                    agent=spec, input=f"go {i}", sandbox=pb.RunSandbox(backend=LOCAL, env={"N": str(i)})
                )
            )
            for i in range(n)
        ]
    )
    runs = [await mesh.wait_status(s.run_id, *DONE) for s in starts]
    assert [r.status for r in runs] == [cpb.RUN_STATUS_COMPLETED] * n, [r.failure for r in runs]
    assert len({r.sandbox_id for r in runs}) == n
    for r in runs:
        await released(mesh, r.sandbox_id)


async def test_canceling_a_running_child_lets_its_waiting_parent_go_on(mesh):
    import asyncio
    import os

    helper = agent(name="helper", tools=[pb.AgentTool(name="exec_command")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=helper))
    boss = agent(name="boss", tools=[pb.AgentTool(name="ask_helper", agent_name="helper")])
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))
    mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("ask_helper", json.dumps({"input": "slow"}))]),
            Reply(
                tool_calls=[
                    ToolCallReply(
                        "exec_command", json.dumps({"cmd": "touch started; sleep 20; touch finished"})
                    )
                ]
            ),
            Reply(text="parent went on"),
        ]
    )
    workspace = os.path.join(mesh.work, "cancel-child")
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go", workspace=workspace))

    async def child_started() -> str:
        while True:
            run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=started.run_id))).run
            if run.child_run_ids and os.path.exists(os.path.join(workspace, "started")):
                return run.child_run_ids[0]
            await asyncio.sleep(0.05)

    child_id = await asyncio.wait_for(child_started(), 30)
    await mesh.runs.CancelRun(pb.CancelRunRequest(run_id=child_id, reason="too slow"))
    child = await mesh.wait_status(child_id, *DONE)
    assert child.status == cpb.RUN_STATUS_CANCELED
    parent = await mesh.wait_status(started.run_id, *DONE)
    assert parent.status == cpb.RUN_STATUS_COMPLETED and parent.final_output == "parent went on", (
        parent.failure
    )
    entries = await mesh.entries(started.session_id)
    (result,) = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert result.child_run_id == child_id and "cancel" in result.content.lower(), result
    assert not os.path.exists(os.path.join(workspace, "finished"))


JUDGE = "You are the JUDGE of inputs."


def _judging(verdicts: dict[str, str], slow_s: float = 3.0):
    """A responder: the judge answers at once with the verdict for the stage it is shown; the
    guarded model is slow (so a racing judge decides while its call is in flight)."""

    def respond(path: str, body):
        text = json.dumps(body)
        if JUDGE in text:
            return Reply(
                text=verdicts.get("any", '{"decision": "allow", "message": ""}'),
                input_tokens=7,
                output_tokens=3,
            )
        return Reply(
            text="the model's answer",
            input_tokens=100,
            output_tokens=10,
            event_delay=slow_s / 10,
            chunk_chars=2,
        )

    return respond


@pytest.mark.parametrize(
    "reply",
    [
        '{"decision": "trip", "message": "no"}',
        "not json at all",
        '{"decision": "replace", "message": ""}',
        '{"decision": "TRIP", "message": "x"}',
        '{"decision": "allow"}',
        '{"decision": "replace", "message": "' + "r" * 200000 + '"}',
        '["allow"]',
        '{"decision": "allow", "message": null}',
    ],
)
async def test_a_racing_model_guardrail_judges_any_reply_cleanly(mesh, reply):
    mesh.emu.responder = _judging({"any": reply})
    judge = pb.Guardrail(name="judge", stages=[IN], model=pb.ModelGuardrail(prompt=JUDGE))
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(tools=[], guardrails=[judge]), input="hello")
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.failure.kind not in ("internal", "unknown"), run.failure
    if run.status == cpb.RUN_STATUS_FAILED:
        assert run.failure.kind in ("guardrail_tripped", "guardrail_failed"), run.failure
        # the guarded call in flight was cancelled: its usage never counts; the judge's does
        assert run.usage.input_tokens == 7, run.usage
    else:
        assert run.final_output == "the model's answer"
    events = await mesh.events(started.run_id)
    results = [e.guardrail_result for e in events if e.WhichOneof("payload") == "guardrail_result"]
    assert len(results) == 1, results
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs


@pytest.mark.slow
@pytest.mark.parametrize(
    "image", ["agentrt-sandbox:does-not-exist", "nosuchrepo/x@sha256:" + "0" * 64, "a" * 200]
)
async def test_a_docker_sandbox_of_a_missing_image_fails_the_run_cleanly(docker_mesh, image):  # noqa: F811
    import asyncio

    from tests.service.runs.sandbox_helpers import DOCKER, owned_containers, sh

    mesh = docker_mesh
    mesh.emu.script([Reply(tool_calls=[sh("echo hi > out.txt")]), Reply(text="never")])
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER, image=image),
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_FAILED, run
    assert run.failure.kind == "sandbox_unavailable", run.failure
    assert run.failure.reason, run.failure
    assert len(mesh.emu.requests) == 1  # the model was not asked again
    entries = await mesh.entries(started.session_id)
    results = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert [r.content for r in results] == ["Not executed: the run's sandbox could not be created."]
    assert await asyncio.to_thread(owned_containers, mesh.docker_owner) == []


@pytest.mark.parametrize(
    "tool",
    [
        pb.AgentTool(name="ask", agent_name="helper", agent_version=999),
        pb.AgentTool(name="ask", agent_name="helper", agent_version=-1),
        pb.AgentTool(name="ask", agent_name="no-such-agent"),
        pb.AgentTool(name="ask", agent_name="bad name!"),
        pb.AgentTool(name="ask", agent_name="x" * 65),
        pb.AgentTool(name="ask", agent_name="helper", needs_approval=True, description="d" * 100000),
    ],
)
async def test_bad_agent_tools_are_refused_at_start(mesh, tool):
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=agent(name="helper", tools=[])))
    mesh.emu.script([Reply(text="x")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(tools=[tool]), input="go"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (info.value.code(), info.value.details())
    assert reason_of(info.value), info.value.details()
    assert (await mesh.runs.ListRuns(pb.ListRunsRequest())).runs == []


async def test_a_turn_that_fans_out_to_many_children_counts_each_once(mesh):
    n = 30
    await mesh.runs.RegisterAgent(
        pb.RegisterAgentRequest(agent=agent(name="helper", tools=[], instructions="HELPER"))
    )
    boss = agent(
        name="boss", instructions="BOSS", tools=[pb.AgentTool(name="ask_helper", agent_name="helper")]
    )
    await mesh.runs.RegisterAgent(pb.RegisterAgentRequest(agent=boss))

    def respond(path: str, body):
        text = json.dumps(body)
        if "HELPER" in text:
            return Reply(text="child ok", input_tokens=2, output_tokens=1)
        if "function_call_output" in text:
            return Reply(text="all done", input_tokens=5, output_tokens=1)
        calls = [ToolCallReply("ask_helper", json.dumps({"input": f"part {i}"})) for i in range(n)]
        return Reply(tool_calls=calls, input_tokens=5, output_tokens=1)

    mesh.emu.responder = respond
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent_name="boss", input="go"))
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    assert len(run.child_run_ids) == n and len(set(run.child_run_ids)) == n
    assert len([p for p, _ in mesh.emu.requests if p.endswith("/responses")]) == n + 2
    assert run.usage.requests == n + 2 and run.nested_usage.requests == n, (run.usage, run.nested_usage)
    assert run.usage.input_tokens == 10 + 2 * n


@pytest.mark.slow
async def test_docker_sandbox_env_with_control_characters_and_a_large_value(docker_mesh):  # noqa: F811
    from tests.service.runs.sandbox_helpers import DOCKER, IMAGE, sh

    mesh = docker_mesh
    env = {"CTRL": "a\nb\x1b[31m\x07\tc=d", "BIG": "x" * 60000, "EMPTY": ""}
    mesh.emu.script(
        [
            Reply(tool_calls=[sh('printf %s "$CTRL" | wc -c; echo ${#BIG}; echo "e=[$EMPTY]"')]),
            Reply(text="done"),
        ]
    )
    started = await mesh.runs.StartRun(
        pb.StartRunRequest(
            agent=agent(tools=[pb.AgentTool(name="exec_command")]),
            input="go",
            sandbox=pb.RunSandbox(backend=DOCKER, image=IMAGE, env=env),
        )
    )
    run = await mesh.wait_status(started.run_id, *DONE)
    assert run.status == cpb.RUN_STATUS_COMPLETED, run.failure
    entries = await mesh.entries(started.session_id)
    (result,) = [e.item.tool_result for e in entries if e.item.HasField("tool_result")]
    assert result.content.split()[:3] == [str(len(env["CTRL"].encode())), "60000", "e=[]"], result.content


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_caller_that_goes_away_while_the_call_is_journaled_never_strands_it(
    start_server, tmp_path, emulator, backend
):
    """Found by a random kill -9 of the runs process (tests/e2e/test_chaos_sandbox_leak.py): a
    caller gone while its call's STARTED record was being written left that record with no
    command behind it, and the next attempt was told "the tool service stopped while it ran"
    (a reconciliation for a command that never started)."""
    import asyncio
    import os

    from tests.service.runs.harness import start_mesh
    from tests.service.runs.sandbox_helpers import tools

    mesh = await start_mesh(start_server, tmp_path, emulator, pg=backend == "postgres")
    stub = tools(mesh)
    workspace = os.path.join(mesh.work, "strand")
    stranded = []
    for i in range(60):
        call = cpb.ToolCall(
            call_id=f"c{i}", name="exec_command", arguments=json.dumps({"cmd": f"echo ran-{i}"})
        )
        req = tpb.ExecuteToolRequest(run_id="r-strand", call=call, workspace=workspace)
        attempt = stub.ExecuteTool(req)
        await asyncio.sleep((i % 20) * 0.0015)  # the caller goes away at a different point each time
        attempt.cancel()
        with __import__("contextlib").suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            await attempt
        for _ in range(200):  # the same call again, as a takeover sends it
            try:
                result = (await stub.ExecuteTool(req)).result
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE), exc.details()
                await asyncio.sleep(0.05)
        if result.status != cpb.TOOL_RESULT_STATUS_OK:
            stranded.append((i, result.summary))
        else:
            assert f"ran-{i}" in result.content, result.content
    assert not stranded, stranded


async def test_agentrt_approve_on_a_parent_answers_its_childs_call(mesh, capsys, monkeypatch):
    import asyncio
    import os

    from agentrt.cli.main import main

    await _register_boss(mesh)
    workspace = os.path.join(mesh.work, "cli-approve")
    started, run, child = await _suspended_child(
        mesh, workspace, [Reply(text="child done"), Reply(text="parent done")]
    )
    monkeypatch.setenv("COLUMNS", "80")
    code = await asyncio.to_thread(main, ["runs", "show", started.run_id, "--runs-addr", mesh.runs_address])
    shown = capsys.readouterr().out
    assert code == 0 and f"in child run {child.run_id}" in shown, shown
    code = await asyncio.to_thread(main, ["approve", started.run_id, "--runs-addr", mesh.runs_address])
    out = capsys.readouterr()
    assert code == 0, (out.out, out.err)
    final = await mesh.wait_status(started.run_id, *DONE)
    assert final.status == cpb.RUN_STATUS_COMPLETED and final.final_output == "parent done", final.failure
    assert open(os.path.join(workspace, "l.txt")).read() == "two\n"
    # approving again: the run is no longer suspended, a clear refusal (exit 1), nothing runs twice
    code = await asyncio.to_thread(main, ["approve", started.run_id, "--runs-addr", mesh.runs_address])
    assert code == 1, capsys.readouterr()
    assert open(os.path.join(workspace, "l.txt")).read() == "two\n"
