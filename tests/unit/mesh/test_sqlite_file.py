"""Where a SQLite file goes: its directory made, or a one-line refusal naming the file."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from agentrt.mesh.storage.db import Database
from agentrt.mesh.storage.sqlite_file import DatabasePathError, prepare_directory


def test_a_missing_directory_is_created(tmp_path):
    path = tmp_path / "a" / "b" / "x.db"
    prepare_directory(str(path))
    assert path.parent.is_dir()


def test_a_directory_under_a_regular_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / "file").write_text("x")
    path = str(tmp_path / "file" / "sub" / "x.db")
    with pytest.raises(DatabasePathError) as caught:
        Database(f"sqlite+aiosqlite:///{path}")
    assert caught.value.path == path and isinstance(caught.value, OSError)
    assert str(caught.value) == (
        f"the SQLite database {path} cannot be opened: its directory {tmp_path}/file/sub cannot be"
        " created (Not a directory)"
    )


def test_a_path_that_is_a_directory_is_refused_naming_it(tmp_path):
    # SQLite said only "unable to open database file" (two lines, the file not named)
    path = tmp_path / "x.db"
    path.mkdir()
    with pytest.raises(DatabasePathError) as caught:
        Database(f"sqlite+aiosqlite:///{path}")
    assert str(caught.value) == f"the SQLite database {path} cannot be opened: it is a directory"


_UNWRITABLE_CHECK = """
import sys
from agentrt.mesh.storage.sqlite_file import DatabasePathError, prepare_directory
locked = sys.argv[1]
for path, expected in ((locked + "/sub/x.db", "cannot be created (Permission denied)"),
                       (locked + "/x.db", f"its directory {locked} is not writable")):
    try:
        prepare_directory(path)
    except DatabasePathError as exc:
        assert expected in str(exc), str(exc)
    else:
        raise SystemExit(f"{path} was not refused")
print("refused")
"""


def test_an_unwritable_directory_is_refused():
    # Run as an unprivileged user (root writes to any directory: CI runs as root, so the
    # check drops to nobody with setpriv rather than skip).
    import agentrt

    base = pathlib.Path(tempfile.mkdtemp(prefix="agentrt-unwritable-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        command = [sys.executable, "-c", _UNWRITABLE_CHECK, str(locked)]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        services = str(pathlib.Path(agentrt.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": services}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr
    finally:
        locked_dir = base / "locked"
        if locked_dir.exists():
            locked_dir.chmod(0o755)
        shutil.rmtree(base)
