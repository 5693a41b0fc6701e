"""Where a SQLite file goes: its directory made, or a one-line refusal naming the file."""

from __future__ import annotations

import os

import pytest

from agentrt.mesh.db import Database
from agentrt.mesh.sqlite_file import DatabasePathError, prepare_directory


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


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to any directory")
def test_an_unwritable_directory_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(DatabasePathError, match="cannot be created \\(Permission denied\\)"):
        prepare_directory(str(locked / "sub" / "x.db"))
    with pytest.raises(DatabasePathError, match=f"its directory {locked} is not writable"):
        prepare_directory(str(locked / "x.db"))
