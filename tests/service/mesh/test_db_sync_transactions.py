"""SQLite's one-hop transactions (mesh.db write_sync/read_sync) on the threads' own connections.

Real SQLite files: a failed transaction rolls back and leaves its thread's connection usable,
a reader sees each committed write, and close() closes every connection the threads opened.
"""

from __future__ import annotations

import sqlalchemy as sa

from agentrt.mesh.db import Database, sqlite_url

META = sa.MetaData()
T = sa.Table("t", META, sa.Column("k", sa.Integer, primary_key=True), sa.Column("v", sa.Integer))


async def test_thread_connections_commit_roll_back_and_close(tmp_path):
    db = Database(sqlite_url(str(tmp_path), "x"))
    await db.create_all(META)

    def insert(k: int):
        return lambda conn: conn.execute(sa.insert(T).values(k=k, v=k))

    def failing(conn):
        conn.execute(sa.insert(T).values(k=100, v=1))
        raise RuntimeError("boom")

    def count(conn):
        return conn.scalar(sa.select(sa.func.count()).select_from(T))

    await db.write_sync(insert(1))
    try:
        await db.write_sync(failing)
    except RuntimeError:
        pass
    else:  # pragma: no cover - the body raised
        raise AssertionError("the failing transaction did not raise")
    await db.write_sync(insert(2))  # the write thread's connection is usable after a rollback
    for expected in (2, 2):  # the same read threads' connections, each transaction fresh
        assert await db.read_sync(count) == expected
    await db.write_sync(insert(3))
    assert await db.read_sync(count) == 3  # a reader sees the last commit, not its old snapshot
    conns = list(db._thread_conns)
    assert conns and len(conns) <= 1 + 4  # one per transaction thread at most
    await db.close()
    assert all(c.closed for c in conns)
    assert db._thread_conns == []
