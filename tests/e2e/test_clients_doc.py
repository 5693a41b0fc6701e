"""docs/clients.md's walkthrough, replayed against a live mesh with the very commands it shows.

Each step of the walkthrough is marked `<!-- replay: NAME -->` and has a grpcurl form and a
`buf curl` form. The commands are taken from the document as written and run by bash with the
variables the document names (RUNS, AGENTRT_AUTH_TOKEN, TENANT, RUN_ID, CALL_ID); the mesh
requires the token, so each step shows the headers work. `buf curl` (from buf-bin) always runs;
grpcurl runs where it is on PATH (no Debian, npm or official PyPI package exists; see
docs/decisions/0003-clients-and-contracts.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from e2e_helpers import MESH_TOKEN, STATE_TIMEOUT, wait_for

from tests.emulators.providers import Reply, ToolCallReply

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
STEPS = ("list", "describe", "start", "stream", "approve")
TOOLS = {"grpcurl": "grpcurl", "buf": "buf curl"}


def walkthrough() -> dict[str, dict[str, str]]:
    """Step name -> tool ("grpcurl" | "buf") -> the command of its ```sh block."""
    text = DOC.read_text()
    marks = list(re.finditer(r"<!-- replay: ([a-z]+) -->", text))
    steps: dict[str, dict[str, str]] = {}
    for mark in marks:
        section = text[mark.end() :].split("\n### ", 1)[0]  # a step ends at the next heading
        blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
        forms = {}
        for block in blocks:
            tool = next(t for t, prefix in TOOLS.items() if block.startswith(prefix))
            forms[tool] = block
        steps[mark.group(1)] = forms
    return steps


def json_values(text: str) -> list:
    """Every JSON value printed one after another (how both tools print a stream)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return values
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return values  # a value still being written
        values.append(value)


def field(obj: dict, snake: str):
    """obj[snake], or its JSON name (grpcurl prints proto names, buf curl JSON names)."""
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), snake)
    return obj.get(snake, obj.get(camel))


def test_the_walkthrough_names_five_steps_in_both_forms():
    steps = walkthrough()
    assert tuple(steps) == STEPS
    for name, forms in steps.items():
        assert set(forms) == {"grpcurl", "buf"}, f"step {name} lacks a form: {sorted(forms)}"
    # the same request body in both forms of the StartRun step
    bodies = {
        tool: re.search(r"<<'EOF'\n(.*?)EOF", cmd, re.S).group(1) for tool, cmd in steps["start"].items()
    }
    assert bodies["grpcurl"] == bodies["buf"]
    json.loads(bodies["buf"])


@pytest.mark.parametrize("tool", ["buf", "grpcurl"])
def test_the_walkthrough_replays_against_a_live_mesh(token_mesh, tmp_path, tool):
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    if tool == "grpcurl" and shutil.which("grpcurl", path=path) is None:
        pytest.skip("grpcurl is not installed here; the buf curl replay covers the walkthrough")
    steps = walkthrough()
    token_mesh.emu.script(
        [
            Reply(tool_calls=[ToolCallReply("exec_command", '{"cmd": "printf hello > hello.txt"}')]),
            Reply(text="hello.txt is written"),
        ]
    )
    env = {
        **os.environ,
        "PATH": path,
        "RUNS": token_mesh.runs,
        "AGENTRT_AUTH_TOKEN": MESH_TOKEN,
        "TENANT": "doc-tenant",
    }

    def run(step: str) -> str:
        done = subprocess.run(
            ["bash", "-c", steps[step][tool]], env=env, capture_output=True, text=True, timeout=STATE_TIMEOUT
        )
        assert done.returncode == 0, f"{step}: {done.stdout}{done.stderr}"
        return done.stdout

    assert "agentrt.v1.RunService" in run("list")
    described = run("describe")
    assert "StartRun" in described and "StreamRunEvents" in described and "ResumeRun" in described

    started = json_values(run("start"))[0]
    env["RUN_ID"] = field(started, "run_id")
    assert env["RUN_ID"].startswith("run_")

    out_path = tmp_path / "stream.out"
    with out_path.open("w") as out:
        stream = subprocess.Popen(
            ["bash", "-c", steps["stream"][tool]], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    timer = threading.Timer(STATE_TIMEOUT, stream.kill)
    timer.start()
    try:

        def suspended() -> dict | None:
            events = [field(v, "event") for v in json_values(out_path.read_text())]
            return next((field(e, "run_suspended") for e in events if field(e, "run_suspended")), None)

        pending = field(wait_for(suspended, "run_suspended on the stream"), "pending_calls")[0]
        env["CALL_ID"] = field(field(pending, "call"), "call_id")
        resumed = json_values(run("approve"))[0]
        assert field(field(resumed, "run"), "run_id") == env["RUN_ID"]
        assert stream.wait(timeout=STATE_TIMEOUT) == 0, out_path.read_text()
    finally:
        timer.cancel()
        if stream.poll() is None:
            stream.kill()
    events = [field(v, "event") for v in json_values(out_path.read_text())]
    seqs = [int(e["seq"]) for e in events]
    assert seqs == list(range(1, len(seqs) + 1))
    envelope = ("seq", "run_id", "runId", "time", "turn", "provisional")
    kinds = [next(k for k in e if k not in envelope) for e in events]
    snake = [re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k) for k in kinds]
    assert snake[0] == "run_started" and snake[-2:] == ["run_completed", "stream_end"]
    assert "tool_returned" in snake and "gap" not in snake
    assert field(events[-1], "stream_end")["status"] == "RUN_STATUS_COMPLETED"
    completed = field(events[-2], "run_completed")
    assert field(completed, "final_output") == "hello.txt is written"
