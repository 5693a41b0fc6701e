"""Transient database errors, and retrying a transaction through them (issue 13).

`is_transient(exc)` is the one classification of a database failure that may succeed when
the same transaction is simply run again: the connection was lost or reset (the server
terminated the backend, `pg_terminate_backend`, a failover, a network cut: SQLSTATE class 08,
57P01..57P03, asyncpg's connection errors, `connection_invalidated`), the transaction lost a
serialization race or a deadlock (40001, 40P01), the server has no connection slot for now
(53300), or SQLite's writer lock timed out ("database is locked"). Everything else (a
constraint, a bad statement, a fencing guard) is not transient.

`connection_lost(exc)` is the narrower question: is the connection itself gone (not a
statement's or a transaction's failure), so that a body that failed before COMMIT can run
once more on another connection (mesh/storage/pg_pool.py `once_more`, decision 0044).

`retry_transient(attempt, committed=...)` runs `attempt` until it returns, retrying a transient
failure with exponential backoff (`RetryPolicy`: attempts, first delay doubled up to a cap,
jittered). A failure during COMMIT leaves the outcome unknown: before each retry `committed()`
(when given) is asked whether the failed attempt's transaction is on record after all, and
then `attempt` is not run again; its result is `on_committed()`'s.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from agentrt.core.errors import MeshError, Reason, Status

log = logging.getLogger("agentrt.mesh.db")

T = TypeVar("T")

#: SQLSTATEs worth running the transaction again for (see the module docstring).
_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03", "53300"})
#: asyncpg's errors for a connection lost under a statement. InternalClientError ("cannot
#: switch to state ...; another operation is in progress") is what its protocol raises when
#: the server ends the session while a statement is being prepared.
_DRIVER_LOST = ("ConnectionDoesNotExistError", "ConnectionFailureError", "InternalClientError")
#: Messages of driver errors that say the connection is gone (asyncpg's, psycopg's).
_GONE = ("connection is closed", "connection was closed", "server closed the connection")
#: Messages of driver errors that carry no SQLSTATE but mean the transaction may succeed again.
_LOST = (
    *_GONE,
    "connection reset",
    "terminating connection",
    "database is locked",
    "cannot perform operation: another operation is in progress",
)


@dataclass(frozen=True)
class RetryPolicy:
    """How a transient failure is retried.

    Attributes:
        attempts: tries in all (the first included), at least 1.
        first_delay_s: the delay before the second try, seconds; doubled per try.
        max_delay_s: cap on one delay, seconds.
    """

    attempts: int = 6
    first_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, retry: int) -> float:
        """Return the delay before retry number `retry` (1-based), jittered to 50..100 %."""
        base = min(self.max_delay_s, self.first_delay_s * (2 ** (retry - 1)))
        return base * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not security


def _sqlstate(exc: BaseException) -> str:
    for err in (exc, getattr(exc, "orig", None), getattr(exc, "__cause__", None)):
        code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if isinstance(code, str) and code:
            return code
        inner = getattr(err, "__cause__", None)
        code = getattr(inner, "sqlstate", None)
        if isinstance(code, str) and code:
            return code
    return ""


def is_transient(exc: BaseException) -> bool:
    """True when running the same transaction again may succeed (see the module docstring)."""
    if getattr(exc, "connection_invalidated", False):
        return True
    code = _sqlstate(exc)
    if code:
        return code in _SQLSTATES or code.startswith("08")
    chain: list[BaseException] = []
    err: BaseException | None = exc
    while err is not None and len(chain) < 5:
        chain.append(err)
        err = err.__cause__ or getattr(err, "orig", None)
        if err in chain:
            break
    for e in chain:
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if type(e).__name__ in _DRIVER_LOST:
            return True
        if any(m in str(e).lower() for m in _LOST):
            return True
    return False


def connection_lost(exc: BaseException) -> bool:
    """True when exc says the connection is gone, not that a statement or transaction failed.

    SQLAlchemy's `connection_invalidated` (its dialect recognised a disconnect), a SQLSTATE
    of class 08 or 57P01..57P03 (the server ended the session), or in the cause chain a
    socket error, asyncpg's ConnectionDoesNotExistError, or a driver's "connection is
    closed", or asyncpg's InternalClientError (its protocol's state error when the server ends
    the session mid-statement). A serialization failure or a deadlock is not (mesh/storage/transient.py
    retries those).
    """
    if getattr(exc, "connection_invalidated", False):
        return True
    seen: list[BaseException] = []
    err: BaseException | None = exc
    while err is not None and err not in seen and len(seen) < 6:
        seen.append(err)
        code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if isinstance(code, str) and (code.startswith("08") or code in ("57P01", "57P02", "57P03")):
            return True
        if isinstance(err, ConnectionError) or type(err).__name__ in _DRIVER_LOST:
            return True
        if any(m in str(err).lower() for m in _GONE):
            return True
        err = getattr(err, "orig", None) or err.__cause__
    return False


def database_unavailable(exc: BaseException) -> MeshError | None:
    """The answer for a transient database failure that reached a handler's edge, else None.

    A driver's or SQLAlchemy's error that `is_transient` (a lost connection, the server
    ending the session, no connection slot, a lock timeout) is UNAVAILABLE/DEPENDENCY_UNAVAILABLE
    with a retry hint, not INTERNAL: nothing is wrong with the request, and the clients'
    channels re-send only idempotent methods on UNAVAILABLE (client/channels.py).
    """
    if not type(exc).__module__.startswith(("asyncpg", "sqlalchemy", "sqlite3")) or not is_transient(exc):
        return None
    return MeshError(
        Status.UNAVAILABLE,
        Reason.DEPENDENCY_UNAVAILABLE,
        f"the database is unavailable ({type(exc).__name__}); retry",
        retry_after_seconds=1.0,
    )


async def retry_transient(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    policy: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
    committed: Callable[[], Awaitable[bool]] | None = None,
    on_committed: Callable[[], Awaitable[T]] | None = None,
) -> T:
    """Run attempt, retrying transient database failures (see the module docstring).

    Args:
        attempt: one whole transaction.
        what: named in the log line of each retry.
        policy: tries and delays.
        committed: asked after a transient failure whether that attempt committed anyway.
        on_committed: the result when it did (required with `committed`).

    Raises:
        Exception: a failure that is not transient, or the last transient one once the
            tries are spent.
    """
    retry = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            retry += 1
            if not is_transient(exc) or retry >= policy.attempts:
                raise
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            log.warning(
                "%s: transient database error (%s: %s); retry %d of %d",
                what,
                type(exc).__name__,
                first,
                retry,
                policy.attempts - 1,
            )
            while True:  # until the failed attempt's outcome is known (or there is nothing to know)
                await asyncio.sleep(policy.delay(retry))
                if committed is None or on_committed is None:
                    break
                try:
                    done = await committed()
                except Exception as check:
                    retry += 1
                    if not is_transient(check) or retry >= policy.attempts:
                        raise
                    continue
                if done:
                    log.warning("%s: the failed attempt had committed; it is not run again", what)
                    return await on_committed()
                break
