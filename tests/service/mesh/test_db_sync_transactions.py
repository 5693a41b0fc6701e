"""SQLite's one-hop transactions (mesh.db write_sync/read_sync): inline, or on the threads' connections.

Real SQLite files: a failed transaction rolls back and leaves its connection usable, a reader
sees each committed write, close() never waits for a transaction in flight (it would block the
event loop), and the file is free for the next Database once it has ended. Inline
transactions (decision 0023) run on the loop's thread; when another connection holds the lock
the loop goes on serving and the transaction runs on its thread once the lock is free.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import sqlalchemy as sa

from agentrt.mesh.storage.db import Database, sqlite_url

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

    pending = asyncio.ensure_future(db.write_sync(held, offload=True))
    assert await asyncio.to_thread(started.wait, 30)
    await db.close()
    release.set()
    assert await pending is True


async def test_uncontended_transactions_run_inline_on_the_loops_thread(tmp_path):
    db = Database(sqlite_url(str(tmp_path), "z"))
    await db.create_all(META)
    loop_thread = threading.get_ident()

    def insert(conn):
        conn.execute(sa.insert(T).values(k=1, v=1))
        return threading.get_ident()

    def read(conn):
        return threading.get_ident(), conn.scalar(sa.select(T.c.v).where(T.c.k == 1))

    assert await db.write_sync(insert) == loop_thread
    assert await db.read_sync(read) == (loop_thread, 1)
    # offload asks for the transaction thread, and sees the inline commit
    got_thread, got = await db.read_sync(read, offload=True)
    assert got_thread != loop_thread and got == 1
    assert db.inline_transactions == 2 and db.inline_fallbacks == 0
    await db.close()


async def test_a_lock_held_elsewhere_never_blocks_the_loop(tmp_path):
    # Another connection (as another process would) holds the write lock. The inline attempt
    # fails at once; the write waits for the lock on its thread while the loop keeps running
    # (the ticker advances), then commits once the lock is released.
    db = Database(sqlite_url(str(tmp_path), "w"))
    await db.create_all(META)
    other = sqlite3.connect(str(tmp_path / "w.db"), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t (k, v) VALUES (7, 7)")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticking = asyncio.ensure_future(ticker())
    write = asyncio.ensure_future(db.write_sync(lambda conn: conn.execute(sa.insert(T).values(k=8, v=8))))
    while ticks < 50:  # the loop runs while the write waits for the lock
        await asyncio.sleep(0)
    assert not write.done()
    assert db.inline_fallbacks == 1
    other.execute("COMMIT")
    await write
    ticking.cancel()
    other.close()
    rows = await db.read_sync(lambda conn: conn.execute(sa.select(T.c.k).order_by(T.c.k)).scalars().all())
    assert rows == [7, 8]
    # the inline connection is usable again after its refused BEGIN
    await db.write_sync(lambda conn: conn.execute(sa.insert(T).values(k=9, v=9)))
    assert db.inline_transactions >= 2
    await db.close()


async def test_a_failed_inline_transaction_rolls_back(tmp_path):
    db = Database(sqlite_url(str(tmp_path), "v"))
    await db.create_all(META)

    def failing(conn):
        conn.execute(sa.insert(T).values(k=1, v=1))
        raise RuntimeError("boom")

    try:
        await db.write_sync(failing)
    except RuntimeError:
        pass
    else:  # pragma: no cover - the body raised
        raise AssertionError("the failing transaction did not raise")
    assert await db.read_sync(lambda conn: conn.scalar(sa.select(sa.func.count()).select_from(T))) == 0
    await db.write_sync(lambda conn: conn.execute(sa.insert(T).values(k=2, v=2)))
    assert await db.read_sync(lambda conn: conn.scalar(sa.select(T.c.k))) == 2
    await db.close()
