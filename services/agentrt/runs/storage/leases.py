"""Leases of runs: acquire, renew, release, the takeover scans, and the check of the run log.

A run is owned by one replica through its row's lease (owner, expiry, fencing token). Every
write of an owner is fenced by its token (runs/storage/store.py `save`); here: taking a lease that is
free, expired or already ours (the token goes up), renewing the leases an owner still holds
(owner and token must match: a renewal never revives a lease another replica took), giving
one up, and the scans that find RUNNING runs with an expired lease (or, for a replica that
starts, held in its own name by an earlier process: decision 0045) and SUSPENDED runs past
their time budget. `lease_overlaps` reads the run log's tokens to prove no lease was held by
two replicas at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import Integer, String, Update, bindparam, func, or_, select, tuple_, update
from sqlalchemy.dialects.postgresql import ARRAY

from agentrt.mesh.storage.db import Database
from agentrt.runs.storage.models import RunLogRow, RunRow
from agentrt.v1 import common_pb2 as cpb

#: Runs renewed by one statement on SQLite (`LeaseRows.renew_leases`): 3 bind parameters
#: each, well inside any build's variable limit.
RENEW_BATCH = 1000


class LeaseRows:
    """The lease half of the runs store (RunStore inherits it; needs `self.db`).

    `lease_db`, when set, is a pool of its own for lease renewals, so a renewal never queues
    behind the runs' writes for a connection (None: `db`).
    """

    db: Database
    lease_db: Database | None = None

    async def log_leases(self, run_id: str) -> list[tuple[int, str, int, str]]:
        """Return the run log's leases in order: (seq, kind, fencing token, lease owner).

        What a check that no lease was held twice reads (`lease_overlaps`).
        """
        query = select(RunLogRow.seq, RunLogRow.kind, RunLogRow.fencing_token, RunLogRow.lease_owner)
        query = query.where(RunLogRow.run_id == run_id).order_by(RunLogRow.seq)
        rows = await self.db.read_sync(lambda conn: conn.execute(query).all())
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def acquire_lease(
        self, run_id: str, owner: str, ttl_s: float, *, status: int = cpb.RUN_STATUS_RUNNING
    ) -> int | None:
        """Take the lease of a run in `status` that is free, expired or already ours.

        Returns:
            The new fencing token, or None when another owner holds a live lease.
        """
        now = time.time()
        free = or_(RunRow.lease_owner == "", RunRow.lease_expires_s < now, RunRow.lease_owner == owner)
        async with self.db.write() as conn:
            result = await conn.execute(
                update(RunRow)
                .where(RunRow.run_id == run_id, RunRow.status == status, free)
                .values(
                    lease_owner=owner, lease_expires_s=now + ttl_s, fencing_token=RunRow.fencing_token + 1
                )
            )
            if result.rowcount == 0:
                return None
            return await conn.scalar(select(RunRow.fencing_token).where(RunRow.run_id == run_id))

    async def renew_leases(
        self, owner: str, tokens: dict[str, int], ttl_s: float
    ) -> tuple[set[str], set[str]]:
        """Extend the leases owner holds; one transaction (on `lease_db` when set).

        The expiry is taken once the connection is in hand, so a wait for the pool does not
        shorten the lease it grants; the runs are renewed by guarded UPDATEs (owner and
        token must match) that also return the cancellations requested, so a replica with
        many runs holds their rows for a round trip or a few, not one per run. Any number
        of runs: on PostgreSQL one statement binds the ids and tokens as two arrays; on
        SQLite the runs go `RENEW_BATCH` to a statement. (One statement binding two
        parameters per run as row values failed on PostgreSQL from about 7,500 runs, "stack
        depth limit exceeded", before asyncpg's 32,767 parameters at 16,384; SQLite builds
        allow 32,766 or 250,000 variables.)

        Args:
            owner: the replica's lease owner id.
            tokens: run id -> the fencing token this replica holds; any number of runs.
            ttl_s: the lease granted from now, seconds.

        Returns:
            (run ids whose lease was lost, run ids whose cancellation was requested).
        """
        if not tokens:
            return set(), set()
        db = self.lease_db or self.db
        pairs = list(tokens.items())
        held: dict[str, bool] = {}
        async with db.write() as conn:
            expires = time.time() + ttl_s
            if db.is_sqlite:
                statements = [
                    _renew_listed(owner, pairs[i : i + RENEW_BATCH], expires)
                    for i in range(0, len(pairs), RENEW_BATCH)
                ]
            else:
                statements = [_renew_arrays(owner, pairs, expires)]
            for statement in statements:
                rows = await conn.execute(statement)
                held.update((r[0], bool(r[1])) for r in rows)
        lost = set(tokens) - set(held)
        canceled = {run_id for run_id, requested in held.items() if requested}
        return lost, canceled

    async def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up (expire it now) if token is still current."""
        async with self.db.write() as conn:
            await conn.execute(
                update(RunRow)
                .where(RunRow.run_id == run_id, RunRow.fencing_token == token)
                .values(lease_owner="", lease_expires_s=0.0)
            )

    async def overdue_suspended(self) -> list[str]:
        """Return ids of SUSPENDED runs whose time budget has ended (004 §2.9)."""
        now = time.time()
        async with self.db.read() as conn:
            rows = await conn.execute(
                select(RunRow.run_id).where(
                    RunRow.status == cpb.RUN_STATUS_SUSPENDED, RunRow.deadline_s > 0, RunRow.deadline_s < now
                )
            )
            return [r[0] for r in rows]

    async def expired_runs(self, own: str = "") -> list[str]:
        """Return ids of RUNNING runs whose lease has expired (takeover candidates).

        With `own` (a replica id), also those whose lease, live or not, is held in that name:
        what a replica starting under that id takes back at once (decision 0045).
        """
        now = time.time()
        lapsed = RunRow.lease_expires_s < now
        if own:
            lapsed = or_(lapsed, RunRow.lease_owner == own)
        async with self.db.read() as conn:
            rows = await conn.execute(
                select(RunRow.run_id).where(RunRow.status == cpb.RUN_STATUS_RUNNING, lapsed)
            )
            return [r[0] for r in rows]


def _renew_listed(owner: str, pairs: list[tuple[str, int]], expires: float) -> Update:
    """The renewal of a slice of runs with their (id, token) pairs listed (SQLite).

    `run_id IN (...)` lets SQLite find the rows by primary key; the row values alone made
    it scan the table once per statement.
    """
    return (
        update(RunRow)
        .where(
            RunRow.lease_owner == owner,
            RunRow.run_id.in_([run_id for run_id, _ in pairs]),
            tuple_(RunRow.run_id, RunRow.fencing_token).in_(pairs),
        )
        .values(lease_expires_s=expires)
        .returning(RunRow.run_id, RunRow.cancel_requested)
    )


def _renew_arrays(owner: str, pairs: list[tuple[str, int]], expires: float) -> Update:
    """The renewal of every run in one statement, ids and tokens bound as two arrays (PostgreSQL)."""
    held = (
        func.unnest(
            bindparam("held_ids", [run_id for run_id, _ in pairs], type_=ARRAY(String)),
            bindparam("held_tokens", [token for _, token in pairs], type_=ARRAY(Integer)),
        )
        .table_valued("run_id", "token")
        .render_derived(name="held")
    )
    return (
        update(RunRow)
        .where(
            RunRow.lease_owner == owner,
            RunRow.run_id == held.c.run_id,
            RunRow.fencing_token == held.c.token,
        )
        .values(lease_expires_s=expires)
        .returning(RunRow.run_id, RunRow.cancel_requested)
    )


def lease_overlaps(entries: Sequence[tuple[int, str, int, str]]) -> list[str]:
    """Return what in a run log's leases (`RunStore.log_leases`) shows a lease held twice.

    Fenced writes make two facts hold: along the log the token never decreases (a holder
    whose token was superseded cannot write), and one token names one owner (a token is
    minted by one acquisition). Entries written with no lease held (owner "") are skipped.

    Returns:
        One message per violation; [] when the log shows one holder at a time.
    """
    problems: list[str] = []
    owners: dict[int, str] = {}
    top = 0
    for seq, kind, token, owner in entries:
        if not owner:
            continue
        if token < top:
            problems.append(f"log seq {seq} ({kind}) written under token {token} after token {top}")
        top = max(top, token)
        if owners.setdefault(token, owner) != owner:
            problems.append(f"token {token} held by {owners[token]!r} and {owner!r} (log seq {seq})")
    return problems
