"""The SQLite journal's inline path knows a taken write lock by SQLite's primary result code.

Python reports SQLite's extended result codes (SQLITE_BUSY_SNAPSHOT 517, SQLITE_BUSY_RECOVERY
261, ...); each is a taken lock, to be answered by the waiting write path (decision 0022),
not an error. The exceptions here are SQLite's own, from real connections to one file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentrt.gateway.journal.inline import write_lock_taken


def _two(tmp_path: Path) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    path = tmp_path / "journal.db"
    a = sqlite3.connect(path, isolation_level=None)
    a.execute("PRAGMA journal_mode=WAL")
    a.execute("CREATE TABLE t (x INTEGER)")
    a.execute("INSERT INTO t VALUES (1)")
    b = sqlite3.connect(path, isolation_level=None)
    b.execute("PRAGMA busy_timeout=0")
    return a, b


def test_a_write_lock_held_elsewhere_is_taken(tmp_path):
    a, b = _two(tmp_path)
    a.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError) as info:
        b.execute("BEGIN IMMEDIATE")
    assert info.value.sqlite_errorcode == 5 and write_lock_taken(info.value)


def test_an_extended_busy_code_is_a_taken_lock_too(tmp_path):
    a, b = _two(tmp_path)
    a.execute("BEGIN")
    a.execute("SELECT * FROM t").fetchall()  # a read snapshot
    b.execute("INSERT INTO t VALUES (2)")  # another connection writes past it
    with pytest.raises(sqlite3.OperationalError) as info:
        a.execute("INSERT INTO t VALUES (3)")
    assert info.value.sqlite_errorcode == 517  # SQLITE_BUSY_SNAPSHOT
    assert write_lock_taken(info.value)


def test_other_operational_errors_are_not(tmp_path):
    a, _ = _two(tmp_path)
    with pytest.raises(sqlite3.OperationalError) as info:
        a.execute("INSERT INTO missing VALUES (1)")
    assert not write_lock_taken(info.value)
