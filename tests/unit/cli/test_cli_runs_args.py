"""Flags of `agentrt runs`, `approve` and `stop`: bad ones are refused while parsing (exit 2)."""

from __future__ import annotations

import pytest

from agentrt.cli.main import build_parser, main


def test_runs_flags_parse_and_the_address_survives_the_show_subcommand():
    args = build_parser().parse_args(["runs", "--runs-addr", "h:1", "--limit", "5", "show", "run_a"])
    assert (args.runs_command, args.run_id, args.runs_addr, args.limit) == ("show", "run_a", "h:1", 5)
    args = build_parser().parse_args(["approve", "run_a", "--deny", "c1", "--deny", "c2", "--reason", "no"])
    assert (args.deny, args.reason) == (["c1", "c2"], "no")
    assert build_parser().parse_args(["stop", "run_a", "--after-turn"]).after_turn is True


@pytest.mark.parametrize(
    "argv",
    [["runs", "--limit", "0"], ["runs", "--limit", "1001"], ["runs", "--limit", "x"], ["approve"], ["stop"]],
)
def test_bad_flags_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and "error" in capsys.readouterr().err


def test_checks_before_any_call_exit_2(capsys):
    assert main(["approve", "run_a", "--reason", "why", "--runs-addr", "127.0.0.1:1"]) == 2
    assert main(["stop", "run_a", "--runs-addr", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "--deny" in err and "--after-turn" in err


def test_runs_show_names_a_reconciliation_and_why_it_waits():
    # a kill of the tool service (or of `serve all`) mid-command leaves such a call
    from agentrt.cli.runs import pending_lines
    from agentrt.v1 import common_pb2 as cpb
    from agentrt.v1 import run_service_pb2 as rpb

    call = rpb.PendingCall(
        call=cpb.ToolCall(call_id="call_1", name="exec_command", arguments='{"cmd": "x"}'),
        kind=rpb.PENDING_CALL_KIND_RECONCILIATION,
        reason="the tool service stopped while it ran",
    )
    (line,) = pending_lines([call])
    assert "waits for reconciliation (the tool service stopped while it ran)" in line, line
    assert "unknown" not in line


def test_reconcile_flags_parse_and_become_one_reconciliation():
    from agentrt.cli.reconcile import reconciliation
    from agentrt.v1 import common_pb2 as cpb
    from agentrt.v1 import run_service_pb2 as rpb

    args = build_parser().parse_args(["reconcile", "run_a", "call_1", "--result", "out", "--error"])
    rec = reconciliation(args)
    assert (rec.call_id, rec.action) == ("call_1", rpb.RECONCILIATION_ACTION_SUPPLY_RESULT)
    assert (rec.result.content, rec.result.is_error, rec.result.status) == (
        "out",
        True,
        cpb.TOOL_RESULT_STATUS_ERROR,
    )
    rec = reconciliation(build_parser().parse_args(["reconcile", "run_a", "call_1", "--result", ""]))
    assert (rec.result.content, rec.result.status) == ("", cpb.TOOL_RESULT_STATUS_OK)  # no output is output
    rec = reconciliation(build_parser().parse_args(["reconcile", "run_a", "call_1", "--fail", "gone"]))
    assert (rec.action, rec.message) == (rpb.RECONCILIATION_ACTION_FAIL, "gone")
    rec = reconciliation(build_parser().parse_args(["reconcile", "run_a", "call_1", "--run-again"]))
    assert rec.action == rpb.RECONCILIATION_ACTION_RUN_AGAIN


@pytest.mark.parametrize(
    "argv",
    [
        ["reconcile", "run_a"],
        ["reconcile", "run_a", "call_1", "--fail"],
        ["reconcile", "run_a", "call_1", "--result", "\udcff"],  # argv bytes that are not UTF-8
    ],
)
def test_reconcile_bad_arguments_exit_2_while_parsing(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and "error" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "say exactly one of --run-again, --fail MESSAGE or --result TEXT"),
        (["--run-again", "--result", "x"], "(got --run-again and --result)"),
        (["--fail", "no", "--error"], "goes with --result TEXT"),
        (["--fail", ""], "--fail needs a MESSAGE"),
    ],
)
def test_reconcile_checks_before_any_call_exit_2(flags, says, capsys):
    # the address answers nothing: a check that let the command through would be exit 4
    assert main(["reconcile", "run_a", "call_1", *flags, "--runs-addr", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
