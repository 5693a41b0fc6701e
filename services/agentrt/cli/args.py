"""Argument types of the `agentrt` command: bad values are refused while parsing (exit 2).

Each function is an argparse `type=`: it returns the parsed value or raises
`argparse.ArgumentTypeError`, which argparse prints as "agentrt …: error: argument …" and
turns into exit status 2, before anything is started or sent.
"""

from __future__ import annotations

import argparse
from typing import BinaryIO

#: The highest base port of `agentrt up`: the fifth service listens on base + 4 <= 65535.
MAX_BASE_PORT = 65535 - 4

#: Database drivers the services run on (mesh/storage/db.py): embedded SQLite or PostgreSQL.
DB_DRIVERS = ("sqlite+aiosqlite", "postgresql+asyncpg")


def _integer(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def port_number(text: str) -> int:
    """Parse a TCP port, 1..65535.

    Port 0 ("any free port") is refused: a served port nobody can learn is of no use, and
    nothing starts a service that way.

    Raises:
        argparse.ArgumentTypeError: not an integer, or outside 1..65535.
    """
    port = _integer(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 1..65535")
    return port


def metrics_port(text: str) -> int:
    """Parse a metrics port, 0..65535 (0 = no /metrics endpoint).

    Raises:
        argparse.ArgumentTypeError: not an integer, or outside 0..65535.
    """
    port = _integer(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"metrics port {port} is outside 0..65535 (0 = none)")
    return port


def base_port(text: str) -> int:
    """Parse the first of five consecutive ports: 1..MAX_BASE_PORT (so base + 4 <= 65535).

    Raises:
        argparse.ArgumentTypeError: not an integer, or out of range.
    """
    port = _integer(text)
    if not 1 <= port <= MAX_BASE_PORT:
        raise argparse.ArgumentTypeError(
            f"base port {port} is outside 1..{MAX_BASE_PORT} (the five services use base..base+4)"
        )
    return port


def check_db_url(url: str) -> str | None:
    """Return why `url` cannot be a service's database, or None when it can."""
    from sqlalchemy.engine import make_url  # only `serve` needs SQLAlchemy
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return f"{url!r} is not a database URL"
    if parsed.drivername not in DB_DRIVERS:
        return f"unsupported database URL {url!r}: use {' or '.join(d + '://…' for d in DB_DRIVERS)}"
    return None


def db_url(text: str) -> str:
    """Parse a `--db` URL: sqlite+aiosqlite:///… or postgresql+asyncpg://….

    Raises:
        argparse.ArgumentTypeError: not a URL, or another driver.
    """
    problem = check_db_url(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def task_text(text: str) -> str:
    """Parse the task of `agentrt run`: UTF-8 text with something besides whitespace, or "-".

    "-" means "read the task from standard input" and is checked when read (`read_task`).

    Raises:
        argparse.ArgumentTypeError: empty or whitespace only, or not valid UTF-8.
    """
    if text == "-":
        return text
    return check_task(text)


def check_task(text: str) -> str:
    """Return text when it is a usable task.

    Python decodes undecodable argv bytes to lone surrogates, which protobuf refuses to
    encode; they are found here instead of as a traceback at StartRun.

    Raises:
        argparse.ArgumentTypeError: empty or whitespace only, or not valid UTF-8.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("the task is not valid UTF-8 text") from None
    if not text.strip():
        raise argparse.ArgumentTypeError("the task is empty")
    return text


def utf8_text(text: str) -> str:
    """Parse free text sent to a server as is (a message, a result): any UTF-8, even empty.

    Raises:
        argparse.ArgumentTypeError: not valid UTF-8 (argv bytes Python decoded to lone surrogates).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("the text is not valid UTF-8") from None
    return text


def read_task(stream: BinaryIO) -> str:
    """Read the task of `agentrt run -` from a byte stream (standard input) to its end.

    Raises:
        argparse.ArgumentTypeError: the bytes are not UTF-8, or the text is blank.
    """
    data = stream.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise argparse.ArgumentTypeError("the task on standard input is not valid UTF-8 text") from None
    return check_task(text)
