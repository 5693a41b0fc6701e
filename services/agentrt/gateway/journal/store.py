"""The model-call journal's store contract, and its in-process implementation.

One row per (tenant, key): the request's fingerprint, the replica holding the call
(`holder`, unique per gateway process), the time until which that hold is good
(`lease_until_s`, renewed while the provider call runs), and once answered the serialized
`GenerateResponse` (state DONE). Invariants every store keeps (decision 0019):

- `claim` inserts a PENDING row only when none exists: of any number of concurrent
  claims of one key, on any replicas, exactly one gets `claimed=True`.
- `take_over` moves a PENDING row whose lease has ended from its dead holder to a new
  one, compare-and-set on the old holder: exactly one waiter re-asks a dead holder's call.
- `finish` turns PENDING into DONE once; a later finish (a holder that lost its lease and
  answered anyway) keeps the first answer and returns it, so every caller of a key sees
  the same response.
- `release` deletes a PENDING row of its holder (the call failed: nothing was answered,
  the next call with the key asks again).
- `sweep` deletes rows created more than `ttl_s` ago (bounded retention).

Times are wall-clock epoch seconds of the gateway processes (`time.time()`): replicas
must keep their clocks within a fraction of the lease (NTP), as the lease is compared
across them.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol


class State(enum.IntEnum):
    """The journal row's state."""

    PENDING = 1
    DONE = 2


@dataclass(frozen=True)
class Row:
    """One journaled call.

    Attributes:
        fingerprint: hex SHA-256 of the request the key was first used for.
        state: PENDING (asked, no answer yet) or DONE.
        holder: the gateway process asking the provider (PENDING).
        lease_until_s: epoch seconds until which the holder's hold is good.
        takeovers: how many times a dead holder's call was re-asked.
        response: the serialized GenerateResponse (DONE), else b"".
        created_at_s: epoch seconds of the first claim.
        cancel_requested: a CancelGenerate asked the holder to stop (PENDING).
    """

    fingerprint: str
    state: State
    holder: str
    lease_until_s: float
    takeovers: int = 0
    response: bytes = b""
    created_at_s: float = 0.0
    cancel_requested: bool = False

    @classmethod
    def read(cls, values: Sequence[Any]) -> Row:
        """The row a claim read back: the values of CLAIMED_COLUMNS, in that order."""
        fingerprint, state, holder, lease_until_s, takeovers, response, created_at_s = values
        return cls(
            fingerprint, State(state), holder, lease_until_s, takeovers, bytes(response or b""), created_at_s
        )


#: The columns a SQL store reads a claimed row back with (`Row.read`).
CLAIMED_COLUMNS = ("fingerprint", "state", "holder", "lease_until_s", "takeovers", "response", "created_at_s")


class JournalStore(Protocol):
    """Where journal rows live (memory: this process; SQL: every replica)."""

    async def prepare(self) -> None:
        """Create or migrate the schema (the server's ready hook)."""

    async def claim(
        self, tenant: str, key: str, fingerprint: str, holder: str, now_s: float, lease_until_s: float
    ) -> tuple[Row, bool]:
        """Insert a PENDING row held by `holder` unless one exists; return (row, inserted)."""

    async def take_over(
        self, tenant: str, key: str, old_holder: str, holder: str, now_s: float, lease_until_s: float
    ) -> bool:
        """Move an expired PENDING row from old_holder to holder; True when this call did."""

    async def renew(self, tenant: str, key: str, holder: str, lease_until_s: float) -> bool:
        """Extend holder's lease on its PENDING row; False when it no longer holds it."""

    async def request_cancel(self, tenant: str, key: str) -> bool:
        """Mark a PENDING row cancel-requested; True when there was one."""

    async def cancel_requested(self, tenant: str, key: str, holder: str) -> bool:
        """True when holder's PENDING row was marked cancel-requested."""

    async def finish(self, tenant: str, key: str, response: bytes, now_s: float) -> bytes:
        """Record the answer of a PENDING row; return the answer on record (the first one)."""

    async def release(self, tenant: str, key: str, holder: str) -> None:
        """Delete holder's PENDING row (the call failed; nothing to replay)."""

    async def sweep(self, now_s: float, ttl_s: float) -> int:
        """Delete rows created before now_s - ttl_s; return how many."""

    async def close(self) -> None:
        """Release connections."""


class MemoryJournalStore:
    """The journal in this process only (the default of an in-process GatewayConfig())."""

    def __init__(self) -> None:
        """Start empty."""
        self._rows: dict[tuple[str, str], Row] = {}
        self._lock = asyncio.Lock()

    async def prepare(self) -> None:
        """Nothing to prepare."""

    async def claim(
        self, tenant: str, key: str, fingerprint: str, holder: str, now_s: float, lease_until_s: float
    ) -> tuple[Row, bool]:
        """See JournalStore.claim."""
        async with self._lock:
            row = self._rows.get((tenant, key))
            if row is not None:
                return row, False
            row = Row(fingerprint, State.PENDING, holder, lease_until_s, created_at_s=now_s)
            self._rows[(tenant, key)] = row
            return row, True

    async def take_over(
        self, tenant: str, key: str, old_holder: str, holder: str, now_s: float, lease_until_s: float
    ) -> bool:
        """See JournalStore.take_over."""
        async with self._lock:
            row = self._rows.get((tenant, key))
            if row is None or row.state != State.PENDING or row.holder != old_holder:
                return False
            if row.lease_until_s >= now_s:
                return False
            self._rows[(tenant, key)] = replace(
                row, holder=holder, lease_until_s=lease_until_s, takeovers=row.takeovers + 1
            )
            return True

    async def renew(self, tenant: str, key: str, holder: str, lease_until_s: float) -> bool:
        """See JournalStore.renew."""
        async with self._lock:
            row = self._rows.get((tenant, key))
            if row is None or row.state != State.PENDING or row.holder != holder:
                return False
            self._rows[(tenant, key)] = replace(row, lease_until_s=lease_until_s)
            return True

    async def request_cancel(self, tenant: str, key: str) -> bool:
        """See JournalStore.request_cancel."""
        async with self._lock:
            row = self._rows.get((tenant, key))
            if row is None or row.state != State.PENDING:
                return False
            self._rows[(tenant, key)] = replace(row, cancel_requested=True)
            return True

    async def cancel_requested(self, tenant: str, key: str, holder: str) -> bool:
        """See JournalStore.cancel_requested."""
        row = self._rows.get((tenant, key))
        pending = row is not None and row.state == State.PENDING and row.holder == holder
        return pending and row is not None and row.cancel_requested

    async def finish(self, tenant: str, key: str, response: bytes, now_s: float) -> bytes:
        """See JournalStore.finish (a swept row is recorded again)."""
        async with self._lock:
            row = self._rows.get((tenant, key))
            if row is not None and row.state == State.DONE:
                return row.response
            base = row or Row("", State.PENDING, "", now_s, created_at_s=now_s)
            self._rows[(tenant, key)] = replace(base, state=State.DONE, response=response)
            return response

    async def release(self, tenant: str, key: str, holder: str) -> None:
        """See JournalStore.release."""
        async with self._lock:
            row = self._rows.get((tenant, key))
            if row is not None and row.state == State.PENDING and row.holder == holder:
                del self._rows[(tenant, key)]

    async def sweep(self, now_s: float, ttl_s: float) -> int:
        """See JournalStore.sweep."""
        async with self._lock:
            old = [k for k, r in self._rows.items() if r.created_at_s < now_s - ttl_s]
            for k in old:
                del self._rows[k]
            return len(old)

    async def close(self) -> None:
        """Nothing to close."""
