"""PostgreSQL pool hygiene: a connection the server closed is never handed out (decision 0044).

What it owns, for `mesh.db.Database` on PostgreSQL (asyncpg under SQLAlchemy's pool):

- `guard_checkout(engine)`: at checkout, a connection whose driver already saw it closed
  (asyncpg's `is_closed()`, a flag of the client: no round trip) is replaced before anyone
  uses it; a connection that sat idle past `PING_IDLE_S` is also pinged (a close nobody
  saw: a proxy that dropped it silently). The hot path sends nothing extra (decision 0025).
- `driver_closed(dbapi_connection)`: that flag, for `Database.autocommit()` and `driver()`, which drop a
  connection that broke under its raw-driver statements instead of returning it to the pool
  (SQLAlchemy invalidates a connection only when the error passed through its own execution).
- `once_more(begin, body)`: the transaction forms of `Database` run a body whose
  connection was lost (mesh/storage/transient.py `connection_lost`: the server closed it, a reset,
  a failover) before COMMIT was sent once more on a fresh connection: nothing of it
  committed, so running it again is safe.

Invariant: the pool never knowingly hands out a closed connection, and nothing here runs a
statement whose outcome may have committed a second time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.mesh.storage.transient import connection_lost

log = logging.getLogger("agentrt.mesh.db")
T = TypeVar("T")

#: A pooled PostgreSQL connection idle longer than this is pinged before use, seconds.
PING_IDLE_S = 10.0


def driver_closed(dbapi_connection: Any) -> bool:
    """Whether the driver already knows this connection is closed (no round trip).

    Takes SQLAlchemy's adapted DBAPI connection (or the driver's own); False for a driver
    without an `is_closed()`.
    """
    driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    is_closed = getattr(driver, "is_closed", None)
    return bool(is_closed()) if callable(is_closed) else False


def server_answered(exc: BaseException) -> bool:
    """Whether exc is the server's answer to a statement, after which the connection is fine.

    True for asyncpg's PostgresError with a SQLSTATE (a constraint, a bad value); False for a
    connection's failure, the driver's own state error or a cancellation, after which the
    connection may be mid-protocol, and for the server ending the session (SQLSTATE 08,
    57P01..57P03).
    """
    code = getattr(exc, "sqlstate", None)
    return isinstance(code, str) and bool(code) and not connection_lost(exc)


def guard_checkout(engine: Engine) -> None:
    """Replace a pooled connection at checkout when it is closed, or idle and dead.

    A connection the driver saw closed (the server terminated it, restarted, or a proxy
    closed it) is replaced at once; one idle past PING_IDLE_S is pinged first (SQLAlchemy's
    `pool_pre_ping` would ping at every checkout: three round trips per transaction,
    decision 0025). Replacing is raising DisconnectionError: the pool opens another.
    """

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["agentrt_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if driver_closed(dbapi_connection):
            raise DisconnectionError("the server closed this pooled connection")
        since = record.info.get("agentrt_idle_since")
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001 - any failure means: use another connection
            raise DisconnectionError(
                f"a pooled connection idle for {time.monotonic() - since:.0f}s is gone"
            ) from exc


async def once_more(
    begin: Callable[[], AbstractAsyncContextManager[AsyncConnection]],
    body: Callable[[AsyncConnection], Awaitable[T]],
) -> T:
    """Run body in the transaction begin() opens; once more when its connection was lost.

    Only a loss before COMMIT was sent (body raised it) is run again: the server rolls a
    transaction back when its connection ends, so nothing of the first run committed. A
    failure at COMMIT (the outcome may be either) and a second loss are raised.

    Raises:
        Whatever body or the COMMIT raises, but for that one lost connection.
    """
    again = True
    while True:
        finished = False
        try:
            async with begin() as conn:
                value = await body(conn)
                finished = True
            return value
        except Exception as exc:
            if finished or not again or not connection_lost(exc):
                raise
            again = False
            log.warning(
                "a transaction's connection was lost before COMMIT (%s); running it once more on a "
                "fresh connection",
                type(exc).__name__,
            )
