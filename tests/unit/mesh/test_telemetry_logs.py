"""Structured logs: JSON lines carrying service, run id, turn, trace and span ids; text stays
the default; conversation content is redacted unless opted in (004 §2.11c)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from agentrt.mesh import telemetry
from agentrt.mesh.telemetry.logs import REDACTED, LogConfig, sensitive, setup_logging
from tests.tracing import recorded


@pytest.fixture
def capture():
    """Yields configure(**LogConfig fields) -> the buffer lines go to; restores the root logger."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()

    def configure(**settings) -> io.StringIO:
        setup_logging("runs", LogConfig(**settings), stream=stream)
        return stream

    yield configure
    setup_logging("test", LogConfig(), stream=io.StringIO())  # the content switch back off
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved_handlers:
        root.addHandler(handler)
    root.setLevel(saved_level)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_records_carry_service_run_turn_trace_and_span(capture):
    stream = capture(format="json")
    log = logging.getLogger("agentrt.runs")
    with recorded() as rec:
        with telemetry.run_span("run-7", agent="a"), telemetry.turn_span(2):
            log.info("turn %d begins", 2, extra={"tool_calls": 3})
    log.warning("outside any run")
    inside, outside = _lines(stream)
    turn = rec.named("turn 2")
    assert (
        inside["message"] == "turn 2 begins"
        and inside["level"] == "INFO"
        and inside["logger"] == "agentrt.runs"
    )
    assert inside["service"] == "runs" and inside["run_id"] == "run-7" and inside["turn"] == 2
    assert inside["trace_id"] == format(turn.context.trace_id, "032x")
    assert inside["span_id"] == format(turn.context.span_id, "016x")
    assert inside["tool_calls"] == 3
    assert inside["time"].endswith("Z") and "T" in inside["time"]
    assert outside["service"] == "runs" and not {"run_id", "turn", "trace_id", "span_id"} & outside.keys()


def test_run_id_is_logged_without_tracing(capture):
    stream = capture(format="json")
    with telemetry.bind_run("run-8", 1):
        logging.getLogger("agentrt.tools").info("running a command")
    (line,) = _lines(stream)
    assert (line["run_id"], line["turn"]) == ("run-8", 1) and "trace_id" not in line


def test_exceptions_are_one_json_field(capture):
    stream = capture(format="json")
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("agentrt.mesh").exception("unhandled error in /x")
    (line,) = _lines(stream)
    assert line["message"] == "unhandled error in /x" and "ValueError: bad" in line["exception"]


def test_text_is_the_default_format(capture):
    stream = capture()
    logging.getLogger("agentrt.cli").info("starting runs on 127.0.0.1:50051")
    text = stream.getvalue()
    assert text.rstrip().endswith("INFO agentrt.cli: starting runs on 127.0.0.1:50051")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_content_is_redacted_unless_opted_in(capture, fmt):
    for opted_in in (False, True):
        stream = capture(format=fmt, content=opted_in)
        logging.getLogger("agentrt.runs").info(
            "the model said %s", sensitive("the secret plan"), extra={"args_": sensitive("{}")}
        )
        text = stream.getvalue().splitlines()[-1]
        assert ("the secret plan" in text) is opted_in
        assert (REDACTED in text) is not opted_in


def test_the_level_floor_applies(capture):
    stream = capture(format="json", level="WARNING")
    logging.getLogger("agentrt.runs").info("quiet")
    logging.getLogger("agentrt.runs").error("loud")
    assert [line["message"] for line in _lines(stream)] == ["loud"]


@pytest.mark.parametrize(
    ("settings", "words"), [({"format": "xml"}, "log format 'xml'"), ({"level": "LOUD"}, "log level")]
)
def test_bad_settings_are_refused(settings, words):
    with pytest.raises(ValueError, match=words):
        LogConfig(**settings)
