"""Where a SQLite database file goes: its directory made ready before any engine opens it.

`prepare_directory(path)` creates the file's directory (as `Database(url)` always did),
checks that the path is not a directory, nor a file it cannot read and write, and checks
that the directory can be written (SQLite creates the file, and in WAL mode its `-wal` and
`-shm` files, beside it). A directory that cannot be had raises `DatabasePathError`: an
`OSError` whose message names the database file and why, one line, so a service's start
reports it as a refusal (cli/serve.py, cli/serve_all.py) rather than a traceback.
"""

from __future__ import annotations

import os


class DatabasePathError(OSError):
    """A SQLite database's directory cannot be created or written; the message names the file.

    Attributes:
        path: the database file (absolute).
    """

    def __init__(self, path: str, why: str) -> None:
        """Carry the database file and why its directory cannot be used."""
        super().__init__(f"the SQLite database {path} cannot be opened: {why}")
        self.path = path


def prepare_directory(path: str) -> None:
    """Create the directory of the SQLite file `path` if missing; check both can be used.

    Args:
        path: the database file, absolute or relative to the working directory.

    Raises:
        DatabasePathError: the directory cannot be created (a parent is a regular file, a
            parent is not writable, ...) or exists but cannot be written; `path` is a
            directory, or a file that cannot be read and written.
    """
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename and exc.filename != directory else ""
        raise DatabasePathError(
            path, f"its directory {directory} cannot be created ({exc.strerror or exc}{where})"
        ) from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DatabasePathError(path, f"its directory {directory} is not writable")
    if os.path.isdir(path):  # SQLite would say only "unable to open database file"
        raise DatabasePathError(path, "it is a directory")
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise DatabasePathError(path, "the file is not readable and writable")
