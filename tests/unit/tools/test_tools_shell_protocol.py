"""The named-shell protocol without a process (004 §2.7k, §2.7l): the completion scanner, the
quoting of commands, session_id decoding, the advertised schema and the shell settings."""

from __future__ import annotations

import json

import pytest

from agentrt.tools.calls import args as A
from agentrt.tools.calls.args import ArgError
from agentrt.tools.calls.catalog import BUILTIN, EXEC_COMMAND, builtin
from agentrt.tools.calls.output import CappedOutput, ProgressBudget
from agentrt.tools.config import ToolsConfig
from agentrt.tools.shell.session import _TRAP_ECHO, _Scanner, quote

TOKEN = b"0123456789abcdef" + b"fedcba9876543210"
LINE = (
    b"\n{ __agentrt_st=; PROMPT_COMMAND='{ __agentrt_end 0123456789abcdef fedcba9876543210; } 2>/dev/null'; }"
)
TRAILER = b"{ __agentrt_end 0123456789abcdef fedcba9876543210; } 2>/dev/null\n"


def _scan(chunks: list[bytes], cap: int = 4096) -> tuple[_Scanner, CappedOutput, list[str]]:
    capture = CappedOutput(cap)
    streamed: list[str] = []
    scanner = _Scanner(
        TOKEN, LINE + b"\n", TRAILER, capture, ProgressBudget(lambda _s, t: streamed.append(t), 1 << 20)
    )
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner, capture, streamed


def test_output_before_the_token_is_the_result_and_status_follows_it():
    scanner, capture, streamed = _scan([b"hello\nworld\n", TOKEN + b" 3 0\n"])
    assert scanner.complete and scanner.status == 3
    assert capture.text() == "hello\nworld\n"
    assert "".join(streamed) == "hello\nworld\n"


@pytest.mark.parametrize("cut", range(1, 40))
def test_token_split_anywhere_across_reads_is_still_found(cut):
    data = b"out\n" + TOKEN + b" 0 0\n"
    scanner, capture, streamed = _scan([data[:cut], data[cut:]])
    assert scanner.complete and scanner.status == 0
    assert capture.text() == "out\n"
    assert TOKEN.decode() not in "".join(streamed)


def test_halves_printed_apart_do_not_complete():
    h1, h2 = TOKEN[:16], TOKEN[16:]
    scanner, capture, _ = _scan([h1 + b" " + h2 + b"\n", h1 + b"\n" + h2 + b"\n", h2 + h1 + b"\n"])
    assert not scanner.complete
    scanner.feed(TOKEN + b" 0 0\n")
    assert scanner.complete
    assert capture.text() == (h1 + b" " + h2 + b"\n" + h1 + b"\n" + h2 + b"\n" + h2 + h1 + b"\n").decode()


def test_an_echo_is_stripped_only_as_the_exact_line_written():
    scanner, capture, _ = _scan([LINE[:10], LINE[10:] + b"\nresult\n" + TOKEN + b" 0 0\n"])
    assert capture.text() == "result\n"
    # the same line through an ONLCR line discipline
    scanner, capture, _ = _scan([LINE.replace(b"\n", b"\r\n") + b"\r\nresult\n" + TOKEN + b" 0 0\n"])
    assert capture.text() == "result\n"


def test_output_that_merely_resembles_the_line_is_kept():
    looks_alike = LINE[:-1] + b"X\n"  # one byte differs
    _, capture, _ = _scan([looks_alike + TOKEN + b" 0 0\n"])
    assert capture.text() == looks_alike.decode()
    _, capture, _ = _scan([b"echo hi\nhi\n" + TOKEN + b" 0 0\n"])  # a command printing its own text
    assert capture.text() == "echo hi\nhi\n"


def test_abort_newline_and_verbose_trailers_are_removed_exactly():
    _, capture, _ = _scan([b"partial\n\n" + TRAILER + TOKEN + b" 1 1\n"])
    assert capture.text() == "partial\n"
    _, capture, _ = _scan([b"partial\n" + _TRAP_ECHO + b"\n" + TRAILER + TOKEN + b" 1 1\n"])
    assert capture.text() == "partial\n"
    # not aborted: a trailing newline is the command's own
    _, capture, _ = _scan([b"partial\n\n" + TOKEN + b" 0 0\n"])
    assert capture.text() == "partial\n\n"


def test_a_flood_is_capped_and_the_token_is_still_found_in_the_tail():
    chunks = [b"y\n" * 32768 for _ in range(16)] + [b"tail-end\n" + TOKEN + b" 0 0\n"]
    scanner, capture, _ = _scan(chunks, cap=1000)
    assert scanner.complete and scanner.status == 0
    assert capture.truncated
    assert capture.total_bytes == 16 * 65536 + len(b"tail-end\n")
    text = capture.text()
    assert text.endswith("tail-end\n") and "bytes of output dropped" in text
    assert len(text.encode()) < 1200


def test_a_malformed_completion_line_is_reported():
    scanner, capture, _ = _scan([b"x\n" + TOKEN + b" nope\n"])
    assert scanner.complete and scanner.malformed and scanner.status is None
    assert capture.text() == "x\n"
    scanner, _, _ = _scan([TOKEN + b" " + b"9" * 64])
    assert scanner.complete and scanner.malformed


def test_bytes_after_the_completion_line_belong_to_nobody():
    scanner, capture, _ = _scan([b"a\n" + TOKEN + b" 0 0\nstray\n"])
    scanner.feed(b"later\n")
    assert capture.text() == "a\n"


def test_only_a_possible_start_of_the_ending_is_held_back():
    scanner, capture, streamed = _scan([b"started\n"])
    assert "".join(streamed) == "started"  # the newline could precede an aborted ending
    scanner.feed(b"more " + TOKEN[:5])
    assert "".join(streamed) == "started\nmore "  # streamed as it comes
    scanner.flush()
    assert capture.text() == "started\nmore " + TOKEN[:5].decode()
    _, _, streamed = _scan([b"x { __agentrt_end 0123"])
    assert "".join(streamed) == "x "


def test_quote_is_printable_ascii_on_one_line():
    text = "cd 'a b' && echo \"$X\" \\ !x\n\ttab é \x7f\r"
    quoted = quote(text)
    assert quoted.startswith("$'") and quoted.endswith("'")
    body = quoted[2:-1]
    assert all(0x20 <= ord(c) < 0x7F for c in body)
    assert "'" not in body and "!" not in body and "\n" not in body
    with pytest.raises(ValueError):
        quote("a\x00b")


@pytest.mark.parametrize("value", [None, 0, False])
def test_session_id_zero_value_sentinels_mean_no_session(value):
    assert A.session_id({"session_id": value}) == ""
    assert A.session_id({}) == ""


@pytest.mark.parametrize("value", [True, 42, 3.14, 0.0, [], {}, "x" * 129])
def test_session_id_other_non_strings_are_refused(value):
    with pytest.raises(ArgError) as info:
        A.session_id({"session_id": value})
    assert "session_id" in str(info.value)


def test_session_id_strings_are_names_even_zero():
    assert A.session_id({"session_id": "0"}) == "0"
    assert A.session_id({"session_id": "build"}) == "build"


def test_schema_offers_session_id_only_with_shells():
    plain = {t.name: t for t in builtin(False)}
    with_shells = {t.name: t for t in builtin(True)}
    assert builtin(False) == BUILTIN
    assert "session_id" not in plain["exec_command"].parameters["properties"]
    props = with_shells["exec_command"].parameters["properties"]
    assert props["session_id"]["type"] == "string"
    assert "session_id" not in with_shells["exec_command"].parameters["required"]
    assert with_shells["exec_command"].retry_safe is False  # a session command is not retry-safe
    assert {n: t for n, t in with_shells.items() if n != "exec_command"} == {
        n: t for n, t in plain.items() if n != "exec_command"
    }
    assert "session_id" not in EXEC_COMMAND.parameters["properties"]
    json.dumps(props)


def test_shell_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("AGENTRT_TOOLS_SHELLS", "0")
    monkeypatch.setenv("AGENTRT_TOOLS_MAX_SHELLS", "4")
    monkeypatch.setenv("AGENTRT_TOOLS_SHELL_IDLE_SECONDS", "12.5")
    config = ToolsConfig.from_env()
    assert (config.shells, config.max_shells, config.shell_idle_seconds) == (False, 4, 12.5)
    monkeypatch.delenv("AGENTRT_TOOLS_SHELLS")
    assert ToolsConfig.from_env().shells is True
    monkeypatch.setenv("AGENTRT_TOOLS_SHELLS", "maybe")
    with pytest.raises(ValueError):
        ToolsConfig.from_env()
    with pytest.raises(ValueError):
        ToolsConfig(max_shells=0)
