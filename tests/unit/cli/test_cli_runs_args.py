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
