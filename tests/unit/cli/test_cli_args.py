"""The `agentrt` command refuses bad arguments while parsing: exit 2, a clear message, no traceback.

Also the pure parts of `agentrt run`: reading the task from standard input, the start order
of `agentrt up`, and where the output says a run's files went.
"""

from __future__ import annotations

import argparse
import io

import pytest
from rich.console import Console

from agentrt.cli.args import MAX_BASE_PORT, read_task
from agentrt.cli.main import build_parser, main
from agentrt.cli.ports import ports_from_base
from agentrt.cli.run import default_workspace, print_outcome
from agentrt.cli.serve import SERVICES
from agentrt.cli.up import START_PHASES
from agentrt.v1 import common_pb2, run_service_pb2


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "hi \udcff\udcfe there"], "not valid UTF-8"),  # how Python decodes argv bytes ff fe
        (["run", ""], "the task is empty"),
        (["run", " \t\n "], "the task is empty"),
        (["up", "--base-port", "65533"], f"outside 1..{MAX_BASE_PORT}"),
        (["up", "--base-port", "0"], f"outside 1..{MAX_BASE_PORT}"),
        (["up", "--base-port", "-5"], f"outside 1..{MAX_BASE_PORT}"),
        (["up", "--base-port", "5x"], "not a whole number"),
        (["serve", "gateway", "--port", "99999"], "port 99999 is outside 1..65535"),
        (["serve", "gateway", "--port", "0"], "port 0 is outside 1..65535"),
        (["serve", "sessions", "--db", "garbage://x"], "unsupported database URL 'garbage://x'"),
        (["serve", "sessions", "--db", "postgresql://x/db"], "postgresql+asyncpg"),
        (["serve", "sessions", "--db", "::::"], "is not a database URL"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, says, capsys):
    assert says in _refused(argv, capsys)


def test_good_arguments_parse():
    parser = build_parser()
    assert parser.parse_args(["up", "--base-port", str(MAX_BASE_PORT)]).base_port == MAX_BASE_PORT
    assert parser.parse_args(["serve", "gateway", "--port", "65535"]).port == 65535
    url = "postgresql+asyncpg://postgres@127.0.0.1/test"
    assert parser.parse_args(["serve", "sessions", "--db", url]).db == url
    assert parser.parse_args(["serve", "sessions", "--db", "sqlite+aiosqlite:///x.db"]).db
    assert parser.parse_args(["run", "-"]).task == "-"
    assert parser.parse_args(["run", "héllo"]).task == "héllo"


def test_serve_refuses_a_bad_database_url_from_the_environment(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("AGENTRT_SESSIONS_DB", "garbage://y")
    monkeypatch.setenv("AGENTRT_STATE_DIR", str(tmp_path))
    assert main(["serve", "sessions", "--port", "1"]) == 2
    assert "unsupported database URL 'garbage://y'" in capsys.readouterr().err


def test_ports_from_base_refuses_ports_past_65535():
    assert list(ports_from_base(MAX_BASE_PORT).values()) == list(range(MAX_BASE_PORT, 65536))
    for bad in (0, MAX_BASE_PORT + 1, 65533):
        with pytest.raises(ValueError):
            ports_from_base(bad)


def test_read_task_from_stdin_bytes():
    long_task = "x" * (3 * 1024 * 1024)  # past the OS argument limit of one argv string
    assert read_task(io.BytesIO(long_task.encode())) == long_task
    assert read_task(io.BytesIO("écris a.txt\n".encode())) == "écris a.txt\n"
    for bad, says in ((b"hi \xff\xfe", "not valid UTF-8"), (b"", "empty"), (b" \n\t", "empty")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            read_task(io.BytesIO(bad))


def test_run_reads_the_task_from_stdin_and_refuses_a_bad_one(monkeypatch, capsys):
    class _Stdin:
        buffer = io.BytesIO(b"\xff\xfe")

    monkeypatch.setattr("sys.stdin", _Stdin())
    assert main(["run", "-", "--runs-addr", "127.0.0.1:1"]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err


def test_up_starts_runs_last_and_every_service_once():
    started = [name for phase in START_PHASES for name in phase]
    assert sorted(started) == sorted(SERVICES) and len(started) == len(SERVICES)
    assert START_PHASES[-1] == ("runs",)


def _outcome(run: run_service_pb2.Run, workspace: str) -> str:
    screen = io.StringIO()
    print_outcome(Console(file=screen, width=300), run, workspace)
    return screen.getvalue()


def test_outcome_names_the_default_workspace(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTRT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("AGENTRT_WORKSPACE_ROOT", raising=False)
    monkeypatch.delenv("AGENTRT_TENANT", raising=False)
    run = run_service_pb2.Run(run_id="run_abc", session_id="ses_1", status=common_pb2.RUN_STATUS_COMPLETED)
    path = default_workspace(run.run_id)
    assert path == str(tmp_path / "workspaces" / "default" / "runs" / "run_abc")

    # not made (yet, or by a tool service with other settings): the rule, and the guess
    shown = _outcome(run, path)
    assert "<workspace root>/default/runs/run_abc" in shown and path in shown

    (tmp_path / "workspaces" / "default" / "runs" / "run_abc").mkdir(parents=True)
    assert f"workspace {path}" in _outcome(run, path)

    # a run with its own workspace names that one only
    run.workspace = "/somewhere/ws"
    shown = _outcome(run, path)
    assert "workspace /somewhere/ws" in shown and path not in shown


def test_health_parses_without_importing_the_other_subcommands():
    """`agentrt health` (a container's health check under a short timeout) imports only itself."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from agentrt.cli.main import main\n"
        "rc = main(['health', '127.0.0.1:1', '--timeout', '0.2'])\n"
        "others = ('agentrt.cli.serve', 'agentrt.cli.demo', 'agentrt.cli.run')\n"
        "loaded = sorted(m for m in others if m in sys.modules)\n"
        "print(rc, loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "4 []", (out.stdout, out.stderr)  # EXIT_UNREACHABLE, nothing else loaded
    assert "127.0.0.1:1" in out.stderr
    full = build_parser()
    assert {"serve", "run", "health", "demo"} <= set(full._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
