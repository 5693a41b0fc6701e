"""The task notification format: written and parsed here, and nowhere else (004 §2.13).

A notification is the text of a user-role entry that the task service appends to a parent
session when one of its tasks ends. The model reads it verbatim and a UI renders it as a
card, so it is built to be read by both:

    [task notification]
    task tsk_01jd... failed attempt=1/3 label="find the bug" summary="could not reach..."
    retry: task tsk_01jd... may be retried (2 attempts left) with task_retry

Each task line is a record: `task <id> <status> attempt=<n>/<max> label="…" summary="…"`.
The id and status come from the service (an id is letters, digits and `_ . : -`; a status
is one word of a fixed set); the label and the summary are model output, so they are
quoted and escaped: a backslash, a double quote, a line feed, a carriage return and every
other control character are written as escapes. A crafted summary therefore cannot end
its own field (the quote is escaped), cannot start another line (line breaks are escaped)
and cannot re-aim the id or status of the line it is on: the parser reads a line whole,
anchored at both ends, and a line that does not match is no task line at all.

A retry hint is a line of its own, never text inside a task line, which consumers would
read as part of the summary. Summaries are bounded (`summarize`, 300 characters by
default) before they are formatted.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

HEADER = "[task notification]"
#: Statuses a task line may carry (the terminal ones; a task waiting on a human is not announced).
STATUSES = ("completed", "failed", "canceled")
#: Default bound on a summary, in characters (004 §2.13 "300-rune summaries").
SUMMARY_CHARS = 300

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
_ID = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}"
_QUOTED = r'"((?:[^"\\\x00-\x1f\x7f]|\\(?:[\\"nrt]|u[0-9a-f]{4}))*)"'
_LINE_RE = re.compile(
    rf"task ({_ID}) ({'|'.join(STATUSES)}) attempt=(\d{{1,9}})/(\d{{1,9}}) label={_QUOTED} summary={_QUOTED}"
)
_ESCAPE_RE = re.compile(r"\\(?:([\\\"nrt])|u([0-9a-f]{4}))")


@dataclass(frozen=True)
class TaskLine:
    """One task line of a notification.

    Attributes:
        task_id: the task.
        status: one of STATUSES.
        attempt: the attempt that ended, from 1.
        max_attempts: the attempt ceiling.
        label: the task's label (unescaped).
        summary: the result summary (unescaped).
    """

    task_id: str
    status: str
    attempt: int
    max_attempts: int
    label: str
    summary: str


def escape(text: str) -> str:
    """Return text as the inside of a quoted field: no quote, backslash or control character left."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ch == "\x7f" or ch in "\u2028\u2029\x85":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def unescape(text: str) -> str:
    """Invert `escape` (text as matched inside a quoted field)."""
    return _ESCAPE_RE.sub(lambda m: _UNESCAPES[m.group(1)] if m.group(1) else chr(int(m.group(2), 16)), text)


def summarize(text: str, limit: int = SUMMARY_CHARS) -> str:
    """Return text's whitespace collapsed and cut to at most `limit` characters ("…" marks a cut).

    Args:
        text: any text (a final output, a failure message).
        limit: the bound in characters (code points), at least 1.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 1, 0)].rstrip() + "…"


def task_line(line: TaskLine) -> str:
    """Return the one-line record of a task ending (see the module docstring).

    Raises:
        ValueError: the id is not an id, the status is not one of STATUSES, or an attempt
            count is below 1. These come from the service, never from a model.
    """
    if not re.fullmatch(_ID, line.task_id):
        raise ValueError(f"not a task id: {line.task_id!r}")
    if line.status not in STATUSES:
        raise ValueError(f"not a notified status: {line.status!r}")
    if line.attempt < 1 or line.max_attempts < 1:
        raise ValueError("attempt counts start at 1")
    return (
        f"task {line.task_id} {line.status} attempt={line.attempt}/{line.max_attempts} "
        f'label="{escape(line.label)}" summary="{escape(line.summary)}"'
    )


def retry_hint(line: TaskLine) -> str:
    """Return the retry hint of a failed task that has attempts left, "" otherwise."""
    left = line.max_attempts - line.attempt
    if line.status != "failed" or left <= 0:
        return ""
    plural = "s" if left != 1 else ""
    return f"retry: task {line.task_id} may be retried ({left} attempt{plural} left) with task_retry"


def format_notification(lines: Iterable[TaskLine]) -> str:
    """Return a notification: the header, then each task line followed by its retry hint.

    Raises:
        ValueError: as `task_line`.
    """
    out = [HEADER]
    for line in lines:
        out.append(task_line(line))
        hint = retry_hint(line)
        if hint:
            out.append(hint)
    out.append("The full result of a task: task_status with its id.")
    return "\n".join(out)


def parse_notification(text: str) -> list[TaskLine]:
    """Return the task lines of a notification, in order; [] when text is no notification.

    Only lines that match the task-line record whole count; hints and any other text are
    skipped. Never raises.
    """
    rows = text.split("\n")
    if not rows or rows[0] != HEADER:
        return []
    found = []
    for row in rows[1:]:
        m = _LINE_RE.fullmatch(row)
        if m is None:
            continue
        found.append(
            TaskLine(
                task_id=m.group(1),
                status=m.group(2),
                attempt=int(m.group(3)),
                max_attempts=int(m.group(4)),
                label=unescape(m.group(5)),
                summary=unescape(m.group(6)),
            )
        )
    return found
