"""Persistence of agents, runs, the run log and run events (one transaction per save point).

What it owns (runs/domain.py holds the values it returns, records.py a row's column
encoding, sql.py its prebuilt statements and row helpers):
- `save()`: the save point. In ONE transaction it updates the run row (guarded by the
  fencing token of the lease and/or the expected status), appends run-log entries and
  inserts events. A guard that no longer holds rolls everything back and returns None:
  the caller lost the lease or the race, and must not act. A transient database failure
  is retried, exactly once in effect (save_retry.py).
- leases: acquire (expired or free), renew, release; a takeover scan for RUNNING runs
  whose lease expired (leases.py, which RunStore inherits).
- the run log read back, and event replay by run (seq) and by session (session_seq)
  (timeline.py, which RunStore inherits).
- on PostgreSQL, every transaction that inserts events also sends one NOTIFY on
  `EVENTS_CHANNEL` (sql.py: numbering, rows, the notification; delivered at
  commit, so a woken subscriber finds the events stored):
  how subscribers on other replicas learn of them (runs/events/notify.py, decision 0011).

Events passed to `save()` either carry their seqs (the owning executor numbers them
live) or are numbered inside the transaction, which is what transitions made outside an
executor (resume, cancel of a suspended run) use: after the highest seq stored AND the
highest an owner reserved (`event_seq_reserved`), so a seq a subscriber may have seen is
never given to another event (004 §2.11).

At most one unfinished run per session: a partial unique index makes the busy check part
of the insert on every backend (`SessionBusy`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import asyncpg
from sqlalchemy import Connection, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from agentrt.mesh.storage.db import Database
from agentrt.runs.domain import TERMINAL, RunRecord, StoredEvent
from agentrt.runs.storage import lite, migrate, pg, sql
from agentrt.runs.storage.input_watch import InputWatch
from agentrt.runs.storage.leases import LeaseRows, lease_overlaps
from agentrt.runs.storage.models import AgentRow, RunRow
from agentrt.runs.storage.records import COLUMNS, decode, decode_mapping, encode
from agentrt.runs.storage.save_retry import save_with_retries
from agentrt.runs.storage.sql import EVENTS_CHANNEL, INPUT_CHANNEL, GuardFailed
from agentrt.runs.storage.timeline import TimelineRows
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: Serializes the registrations of one agent name on PostgreSQL (until the transaction ends).
_AGENT_NAME_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))")


class RunStore(LeaseRows, TimelineRows):
    """The runs database (see the module docstring)."""

    def __init__(self, db: Database, replica: str = "") -> None:
        """Wrap an open Database; `replica` names this process in its event notifications."""
        self.db = db
        self.replica = replica
        #: The pushes this process has heard of, for its executors (decision 0060).
        self.input_watch = InputWatch()

    async def create_tables(self) -> None:
        """Bring the runs tables to the newest schema (Alembic; see agentrt.runs.migrate)."""
        await migrate.upgrade(self.db)

    # -- agents ---------------------------------------------------------------------------

    async def register_agent(self, tenant: str, spec: pb.AgentSpec) -> pb.AgentSpec:
        """Store spec as the next version of its name; return it with the version set.

        Registrations of one name are serialized (SQLite's write transaction; on PostgreSQL
        a transaction-scoped advisory lock on the name), so concurrent ones get successive
        versions; without it all but one failed on the version's key.
        """
        async with self.db.write() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(_AGENT_NAME_LOCK, {"k": f"agent:{tenant}/{spec.name}"})
            latest = await conn.scalar(
                select(func.max(AgentRow.version)).where(
                    AgentRow.tenant == tenant, AgentRow.name == spec.name
                )
            )
            stored = pb.AgentSpec()
            stored.CopyFrom(spec)
            stored.version = (latest or 0) + 1
            await conn.execute(
                insert(AgentRow).values(
                    tenant=tenant,
                    name=spec.name,
                    version=stored.version,
                    spec=stored.SerializeToString(),
                    create_time_s=time.time(),
                )
            )
        return stored

    async def get_agent(self, tenant: str, name: str, version: int = 0) -> pb.AgentSpec | None:
        """Return the agent's spec (latest when version is 0), or None."""
        query = select(AgentRow.spec).where(AgentRow.tenant == tenant, AgentRow.name == name)
        query = (
            query.where(AgentRow.version == version) if version else query.order_by(AgentRow.version.desc())
        )
        async with self.db.read() as conn:
            raw = await conn.scalar(query.limit(1))
        return pb.AgentSpec.FromString(raw) if raw is not None else None

    # -- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str, tenant: str | None = None) -> RunRecord | None:
        """Return the run (only the tenant's when tenant is given), or None."""
        if self.db.is_sqlite:
            row = await self.db.read_sync(lambda conn: lite.get_run(conn, run_id, tenant))
        else:
            row = await pg.get_run(self.db, run_id, tenant)
        return decode_mapping(row) if row is not None else None

    async def pending_input(self, run_id: str) -> list[dict[str, Any]]:
        """Return the run's queued injected input, oldest first ([] for an unknown run).

        Reads the one column: a save point asks this every turn.
        """
        if self.db.is_sqlite:
            raw = await self.db.read_sync(lambda conn: lite.pending_input(conn, run_id))
        else:
            raw = await pg.pending_input(self.db, run_id)
        return json.loads(raw or "[]")

    async def find_idempotent(self, tenant: str, key: str) -> RunRecord | None:
        """Return the tenant's run started with idempotency key, or None."""
        async with self.db.read() as conn:
            row = (
                await conn.execute(
                    select(RunRow).where(RunRow.tenant == tenant, RunRow.idempotency_key == key)
                )
            ).first()
        return decode(row) if row is not None else None

    async def busy_run(self, tenant: str, session_id: str) -> str | None:
        """Return the id of an unfinished run of the session, or None."""
        async with self.db.read() as conn:
            return await conn.scalar(sql.busy_query(tenant, session_id))

    async def insert_run(
        self, record: RunRecord, events: Sequence[pb.RunEvent]
    ) -> tuple[RunRecord, list[StoredEvent]]:
        """Insert a new run with its "started" log entry and first events, in one transaction.

        Returns:
            (record, stored events) of the new run; or, when the idempotency key is
            already taken, (the existing run, []).

        Raises:
            SessionBusy: the session has an unfinished run (the partial unique index
                refuses the insert, so two racing StartRuns cannot both win).
        """
        values = dict(encode(k, getattr(record, k)) for k in COLUMNS)
        started = {"input": record.input}
        # The unique indexes are the checks (a taken idempotency key, the session's
        # unfinished run): the insert fails and the except below tells which.
        try:
            if self.db.is_sqlite:
                stored = await self.db.write_sync(lambda conn: lite.insert_run(conn, values, started, events))
            else:
                stored = await pg.insert_run(self.db, values, started, time.time(), events, self.replica)
        except (IntegrityError, asyncpg.IntegrityConstraintViolationError):
            if record.idempotency_key:
                existing = await self.find_idempotent(record.tenant, record.idempotency_key)
                if existing is not None:
                    return existing, []
            other = await self.busy_run(record.tenant, record.session_id)
            if other is not None:
                raise SessionBusy(other) from None
            raise
        return record, stored

    async def list_runs(
        self, tenant: str, session_id: str, limit: int, before_run_id: str = ""
    ) -> list[RunRecord]:
        """Return up to limit runs of the tenant (of one session when given), newest first."""
        query = select(RunRow).where(RunRow.tenant == tenant)
        if session_id:
            query = query.where(RunRow.session_id == session_id)
        if before_run_id:
            query = query.where(RunRow.run_id < before_run_id)
        query = query.order_by(RunRow.run_id.desc()).limit(limit)
        async with self.db.read() as conn:
            return [decode(r) for r in (await conn.execute(query)).all()]

    async def save(
        self,
        run_id: str,
        *,
        changes: dict[str, Any] | None = None,
        log: Iterable[tuple[str, dict[str, Any]]] = (),
        events: Sequence[StoredEvent] = (),
        new_events: Sequence[pb.RunEvent] = (),
        token: int | None = None,
        expect_status: Sequence[int] | None = None,
        session: tuple[str, str] | None = None,
        drop_inputs: Sequence[str] = (),
        settle: Callable[[str | None], None] | None = None,
        expect_marker: float | None = None,
    ) -> list[StoredEvent] | None:
        """The save point: update the run, append log entries, insert events; one transaction.

        Args:
            run_id: the run.
            changes: RunRecord field -> new value.
            log: (kind, payload) run-log entries, appended in order.
            events: events already numbered by the owning executor.
            new_events: events to number here (max + 1); needs `session` (tenant, id).
            token: the fencing token the caller holds; the write happens only if it is current.
            expect_status: the write happens only in one of these statuses.
            session: (tenant, session_id) for new_events.
            drop_inputs: ids of injected input consumed (removed from the queue here, so
                input injected meanwhile is kept).
            settle: called with the run's input queue (JSON) as the save finds it, under
                the row's lock, before `events` are written; it may change them in place
                (a run's end reports the input it leaves undelivered as of its commit).
                Called again when the transaction is retried.
            expect_marker: the write happens only while the run's last save is still the one
                whose mark (`RunRecord.update_time_s`) the caller read: a read-merge-write
                (ResumeRun's answers) then never overwrites another replica's write made
                since its read. Checked under the row's lock; one more statement.

        Returns:
            The events numbered here (possibly []), or None when a guard failed (nothing written).
        """
        values = dict(encode(k, v) for k, v in (changes or {}).items())
        # Also this save's mark: after a COMMIT whose answer was lost, the row says whether it landed.
        values["update_time_s"] = marker = time.time()
        statuses = None if expect_status is None else list(expect_status)
        log = list(log)
        reached_commit = False

        def sending() -> None:
            nonlocal reached_commit
            reached_commit = True

        what = (run_id, values, token, statuses, log, events)

        def transaction(conn: Connection) -> list[StoredEvent]:
            nonlocal reached_commit
            reached_commit = False
            if expect_marker is not None:
                mark = select(RunRow.update_time_s).where(RunRow.run_id == run_id)
                if not self.db.is_sqlite:  # SQLite's write transaction is exclusive already
                    mark = mark.with_for_update()
                if conn.execute(mark).scalar() != expect_marker:
                    raise GuardFailed()
            if self.db.is_sqlite:
                stored = lite.save(conn, *what, new_events, session, drop_inputs, settle)
            else:
                stored = sql.save(conn, self.replica, *what, new_events, session, drop_inputs, settle)
            reached_commit = True
            return stored

        async def one_call() -> list[StoredEvent]:
            nonlocal reached_commit
            reached_commit = False
            if not await pg.save(self.db, *what, self.replica, marker, sending, settle):
                raise GuardFailed()
            return []

        # One transaction: on SQLite the driver's statements, inline on the loop's thread
        # (mesh.db write_sync); on PostgreSQL one call of runs_save when it can carry the
        # save (pg.carries), else SQLAlchemy's transaction. A transient failure (a lost
        # connection, a serialization failure, a deadlock) is retried (runs/storage/save_retry.py);
        # a guard that fails is an answer, never retried.
        attempt: Callable[[], Awaitable[list[StoredEvent]]] = one_call
        slow = new_events or drop_inputs or expect_marker is not None
        if self.db.is_sqlite or slow or not pg.carries(values, run_id, events):
            attempt = lambda: self.db.write_sync(transaction)  # noqa: E731
        try:
            return await save_with_retries(
                self, run_id, attempt, lambda: reached_commit, marker, len(new_events)
            )
        except GuardFailed:
            return None

    async def push_input(self, run_id: str, item: dict[str, Any]) -> int | None:
        """Queue injected input on an unfinished run; return its 1-based queue position.

        Returns None when the run has finished (nothing is queued).

        The queue is read under the row's lock (PostgreSQL's FOR UPDATE; SQLite's write
        transaction is exclusive), so a push never overwrites another push, nor brings
        back what a save point consumed meanwhile. Once committed, the push is noted in this
        process's `input_watch`; on PostgreSQL it also notifies `INPUT_CHANNEL` at its commit,
        for the replica whose executor drives the run (decision 0060).
        """
        async with self.db.write() as conn:
            row = (
                await conn.execute(
                    select(RunRow.status, RunRow.pending_input_json)
                    .where(RunRow.run_id == run_id)
                    .with_for_update()
                )
            ).first()
            if row is None or row[0] in TERMINAL:
                return None
            queued = [*json.loads(row[1] or "[]"), item]
            await conn.execute(
                update(RunRow).where(RunRow.run_id == run_id).values(pending_input_json=json.dumps(queued))
            )
            if not self.db.is_sqlite:
                await conn.execute(text("SELECT pg_notify(:ch, :run)"), {"ch": INPUT_CHANNEL, "run": run_id})
        self.input_watch.pushed(run_id)
        return len(queued)

    async def reserve(self, run_id: str, token: int, seq: int, session_seq: int) -> bool:
        """Raise the run's event reservation to (seq, session_seq), fenced by token.

        Returns:
            False when the token is no longer current (the lease was lost).
        """
        async with self.db.write() as conn:
            result = await conn.execute(
                update(RunRow)
                .where(RunRow.run_id == run_id, RunRow.fencing_token == token)
                .values(event_seq_reserved=seq, session_seq_reserved=session_seq)
            )
        return bool(result.rowcount)

    async def suspended_on_children(self) -> list[str]:
        """Return ids of SUSPENDED runs waiting on child runs (state `child_pending`, 004 §2.8)."""
        async with self.db.read() as conn:
            rows = await conn.execute(
                select(RunRow.run_id).where(
                    RunRow.status == cpb.RUN_STATUS_SUSPENDED, RunRow.state_json.like('%"child_pending"%')
                )
            )
            return [r[0] for r in rows]

    async def unreleased_sandboxes(self, limit: int) -> list[RunRecord]:
        """Return up to `limit` ended runs with a sandbox not yet known to be gone.

        Ended (TERMINAL) runs whose state names a sandbox and lacks the `sandbox_released`
        mark (runs/lifecycle/sandboxes.py `sweep`), oldest update first.
        """
        query = (
            select(RunRow)
            .where(
                RunRow.status.in_(list(TERMINAL)),
                RunRow.state_json.like('%"sandbox_id"%'),
                RunRow.state_json.not_like('%"sandbox_released"%'),
            )
            .order_by(RunRow.update_time_s)
            .limit(limit)
        )
        async with self.db.read() as conn:
            return [decode(r) for r in (await conn.execute(query)).all()]

    async def mark_sandbox_released(self, run_id: str) -> None:
        """Mark an ended run's sandbox as gone (state `sandbox_released`); one transaction."""
        async with self.db.write() as conn:
            raw = await conn.scalar(
                select(RunRow.state_json)
                .where(RunRow.run_id == run_id, RunRow.status.in_(list(TERMINAL)))
                .with_for_update()  # read and written back whole: under the row's lock
            )
            if raw is None:
                return
            state = json.loads(raw or "{}")
            state["sandbox_released"] = True
            await conn.execute(
                update(RunRow).where(RunRow.run_id == run_id).values(state_json=json.dumps(state))
            )


class SessionBusy(Exception):
    """The session already has an unfinished run (its id is the argument)."""


__all__ = ["EVENTS_CHANNEL", "INPUT_CHANNEL", "RunStore", "SessionBusy", "lease_overlaps"]
