"""SQLite's one-hop transactions (mesh.db write_sync/read_sync) on the threads' own connections.

Real SQLite files: a failed transaction rolls back and leaves its thread's connection usable,
a reader sees each committed write, close() never waits for a transaction in flight (it would
block the event loop), and the file is free for the next Database once it has ended.
"""

from __future__ import annotations

import asyncio
import threading

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
    await db.close()
    again = Database(sqlite_url(str(tmp_path), "x"))
    await again.write_sync(insert(4))  # nothing of the first Database holds the file
    assert await again.read_sync(count) == 4
    await again.close()


async def test_close_does_not_wait_for_a_transaction_in_flight(tmp_path):
    # The transaction waits for the test to release it, which happens only after close()
    # returned: a close() that waited for the thread would block the loop until the body's
    # safety bound, and the body would report that it was not released.
    db = Database(sqlite_url(str(tmp_path), "y"))
    await db.create_all(META)
    started, release = threading.Event(), threading.Event()

    def held(conn):
        started.set()
        released = release.wait(30)  # a safety bound, not a timing assertion
        conn.execute(sa.insert(T).values(k=1, v=1))
        return released

    pending = asyncio.ensure_future(db.write_sync(held))
    assert await asyncio.to_thread(started.wait, 30)
    await db.close()
    release.set()
    assert await pending is True
