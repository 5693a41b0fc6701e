"""Log records of a service process: plain text by default, JSON lines when asked (004 §2.11c).

`setup_logging(service, LogConfig)` is called once by the process edge (`agentrt serve`);
library modules only log through `logging.getLogger("agentrt.<room>")` and install nothing.

Every record carries `service`, and — when the context has them — `run_id` and `turn`
(bound by the domain spans or `bind_run`, telemetry/spans.py) and the current span's
`trace_id` and `span_id` (hex, as trace backends show them), so a log line can be joined
to its trace. The JSON format writes one object per line: `time` (UTC, RFC 3339 with
milliseconds), `level`, `logger`, `message`, `service`, those ids when present, `exception`
(the formatted traceback) when there is one, and any `extra=` field whose value is JSON.

Conversation content is a second, separate opt-in (004 §2.11c): a value wrapped in
`sensitive(value)` renders as `[redacted]` unless `LogConfig.content` is set, whatever the
format and whatever handler the record reaches. Logging's content switch is not tracing's
(`AGENTRT_TRACE_CONTENT`): writing log lines and exporting spans are different exposures.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from opentelemetry import trace

from agentrt.mesh.telemetry.spans import current_run_id, current_turn

#: Log formats `LogConfig.format` may name.
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "[redacted]"

_show_content = False

#: Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_OURS = frozenset({"service", "run_id", "turn", "trace_id", "span_id"})


@dataclass(frozen=True)
class LogConfig:
    """How a service process logs (read at the edge by `mesh.config.logging_from_env`).

    Attributes:
        level: a logging level name ("DEBUG", "INFO", ...).
        format: "text" (the default) or "json" (one JSON object per line).
        content: values marked `sensitive` are shown instead of "[redacted]" (opt-in).
    """

    level: str = "INFO"
    format: str = "text"
    content: bool = False

    def __post_init__(self) -> None:
        """Check the names.

        Raises:
            ValueError: an unknown format or level.
        """
        if self.format not in FORMATS:
            raise ValueError(f"log format {self.format!r} is not one of {', '.join(FORMATS)}")
        if not isinstance(logging.getLevelName(self.level.upper()), int):
            raise ValueError(f"log level {self.level!r} is not a logging level (DEBUG, INFO, WARNING, ERROR)")


class Sensitive:
    """A value that is conversation content: rendered only when content logging is on."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return str(self.value) if _show_content else REDACTED

    def __repr__(self) -> str:
        return repr(self.value) if _show_content else REDACTED


def sensitive(value: object) -> Sensitive:
    """Return value marked as conversation content (rendered "[redacted]" unless opted in).

    Example: `log.debug("the model said %s", sensitive(text))`.
    """
    return Sensitive(value)


class ContextFilter(logging.Filter):
    """Stamps each record with the service and the context's run id, turn, trace and span ids."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields (never drops a record)."""
        record.service = self.service
        run_id = current_run_id()
        if run_id:
            record.run_id = run_id
        turn = current_turn()
        if turn:
            record.turn = turn
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (fields in the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON."""
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("service", "run_id", "turn", "trace_id", "span_id"):
            value = getattr(record, key, None)
            if value:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        for key, value in record.__dict__.items():
            if key in _STANDARD or key in _OURS or key.startswith("_"):
                continue
            if isinstance(value, Sensitive):
                value = str(value)
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                value = str(value)
            out[key] = value
        return json.dumps(out, ensure_ascii=False)


def setup_logging(service: str, config: LogConfig, stream: IO[str] | None = None) -> logging.Handler:
    """Log the process's records to stream (stderr) in the configured format; return the handler.

    Replaces the root logger's handlers (the process edge owns them). Alembic's INFO chatter
    is raised to WARNING: it would push the lines worth reading out of a log's tail.

    Args:
        service: stamped on every record ("runs", "gateway", ...).
        config: level, format and the content switch.
        stream: where lines go; None = sys.stderr.
    """
    global _show_content
    _show_content = config.content
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(ContextFilter(service))
    handler.setFormatter(JsonFormatter() if config.format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(config.level.upper())
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return handler
