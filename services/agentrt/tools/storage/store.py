"""Persistence of the execution journal and the sandboxes (SQLAlchemy 2 async).

Every method is one transaction. Conditional updates carry their condition in the WHERE
clause (compare-and-set), so two processes racing on one call never both win: `start`
inserts (a second insert loses on the primary key), `finish` and `claim_orphan` only
update a row still "started" by the expected owner.

A call's key is (tenant, run_id, call_id, attempt). Attempt 0 is stored under the call id
itself; a re-run ordered by a reconciliation (attempt n >= 1) under "<call_id>#<n>", so
every attempt is its own record and the column keeps one meaning for old rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.mesh.storage.db import Database
from agentrt.tools.calls.results import Outcome
from agentrt.tools.storage.finished import insert_finished
from agentrt.tools.storage.models import Execution, SandboxRow

STARTED = "started"
FINISHED = "finished"


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    # SQLite hands datetimes back naive; every stored one is UTC.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class CallKey:
    """The idempotency key of a call: one execution attempt of it (0 = the first)."""

    tenant: str
    run_id: str
    call_id: str
    attempt: int = 0

    @property
    def column(self) -> str:
        """The stored call_id of this attempt (see the module docstring)."""
        return self.call_id if not self.attempt else f"{self.call_id}#{self.attempt}"


@dataclass(frozen=True)
class ExecRecord:
    """A journal row as the domain reads it."""

    key: CallKey
    tool: str
    fingerprint: str
    state: str
    owner: str
    heartbeat_at: datetime
    outcome: Outcome | None


@dataclass(frozen=True)
class SandboxRecord:
    """A sandbox row as the domain reads it."""

    tenant: str
    sandbox_id: str
    backend: str
    state: str
    workspace: str
    owns_workspace: bool
    settings_json: str
    fingerprint: str


#: The journal lookup of every call, built once (bound parameters p_*; decision 0017).
_GET = select(Execution).where(
    Execution.tenant == bindparam("p_tenant"),
    Execution.run_id == bindparam("p_run"),
    Execution.call_id == bindparam("p_call"),
)


def _key_where(key: CallKey) -> tuple:
    return (Execution.tenant == key.tenant, Execution.run_id == key.run_id, Execution.call_id == key.column)


class ToolStore:
    """The tool service's tables over one Database."""

    def __init__(self, db: Database) -> None:
        """Wrap db (tables come from `agentrt.tools.storage.migrate.upgrade`)."""
        self.db = db

    # -- journal ------------------------------------------------------------------------

    async def get(self, key: CallKey) -> ExecRecord | None:
        """Return the record of a call, or None when it never started here."""

        async def body(conn: AsyncConnection) -> Any:
            params = {"p_tenant": key.tenant, "p_run": key.run_id, "p_call": key.column}
            return (await conn.execute(_GET, params)).mappings().first()

        # Hot path of every call: one hop to the database thread (mesh.db read_tx).
        row = await self.db.read_tx(body)
        if row is None:
            return None
        outcome = Outcome.from_json(row["result_json"]) if row["result_json"] else None
        return ExecRecord(
            key,
            row["tool"],
            row["fingerprint"],
            row["state"],
            row["owner"],
            _aware(row["heartbeat_at"]),
            outcome,
        )

    async def start(self, key: CallKey, tool: str, fingerprint: str, owner: str) -> bool:
        """Insert a STARTED record; False when a record already exists (someone else won)."""
        now = utcnow()
        try:
            async with self.db.write() as conn:
                await conn.execute(
                    insert(Execution).values(
                        tenant=key.tenant,
                        run_id=key.run_id,
                        call_id=key.column,
                        tool=tool,
                        fingerprint=fingerprint,
                        state=STARTED,
                        owner=owner,
                        started_at=now,
                        heartbeat_at=now,
                    )
                )
        except IntegrityError:
            return False
        return True

    async def record(self, key: CallKey, tool: str, fingerprint: str, owner: str, outcome: Outcome) -> bool:
        """Insert a FINISHED record at once (read-only calls); False when one already exists.

        One statement (`finished.insert_finished`, decision 0025): inline driver SQL on
        SQLite, outside a transaction on PostgreSQL.
        """
        now = utcnow()
        values = (key.tenant, key.run_id, key.column, tool, fingerprint, FINISHED, owner, now, now, now)
        return await insert_finished(self.db, (*values, outcome.to_json()))

    async def heartbeat(self, key: CallKey, owner: str) -> bool:
        """Refresh a started call's heartbeat.

        Returns:
            True when a cancel of the call was requested (by another process).
        """
        async with self.db.write() as conn:
            await conn.execute(
                update(Execution)
                .where(*_key_where(key), Execution.state == STARTED, Execution.owner == owner)
                .values(heartbeat_at=utcnow())
            )
            asked = await conn.scalar(select(Execution.cancel_requested).where(*_key_where(key)))
        return bool(asked)

    async def request_cancel(self, key: CallKey) -> bool:
        """Ask the process running a started call to kill it (it checks at its heartbeat).

        Returns:
            False when the record is not started (finished meanwhile, or absent).
        """
        async with self.db.write() as conn:
            result = await conn.execute(
                update(Execution)
                .where(*_key_where(key), Execution.state == STARTED)
                .values(cancel_requested=True)
            )
        return bool(result.rowcount)

    async def finish(self, key: CallKey, owner: str, outcome: Outcome) -> bool:
        """Record the result of a call this owner started.

        Returns:
            False when the record was taken from it (declared orphaned by another process) or is gone.
        """
        now = utcnow()
        async with self.db.write() as conn:
            result = await conn.execute(
                update(Execution)
                .where(*_key_where(key), Execution.state == STARTED, Execution.owner == owner)
                .values(state=FINISHED, finished_at=now, heartbeat_at=now, result_json=outcome.to_json())
            )
        return bool(result.rowcount)

    async def claim_orphan(self, key: CallKey, owner: str, stale_seconds: float, outcome: Outcome) -> bool:
        """Finish a started call whose owner stopped heartbeating with outcome (INTERRUPTED).

        Returns:
            True when the record was still started by `owner` and stale, and is now finished.
        """
        now = utcnow()
        async with self.db.write() as conn:
            result = await conn.execute(
                update(Execution)
                .where(
                    *_key_where(key),
                    Execution.state == STARTED,
                    Execution.owner == owner,
                    Execution.heartbeat_at < now - timedelta(seconds=stale_seconds),
                )
                .values(state=FINISHED, finished_at=now, heartbeat_at=now, result_json=outcome.to_json())
            )
        return bool(result.rowcount)

    async def abandon(self, key: CallKey, owner: str) -> None:
        """Delete a started record whose call never ran (the sandbox refused it)."""
        async with self.db.write() as conn:
            await conn.execute(
                delete(Execution).where(
                    *_key_where(key), Execution.state == STARTED, Execution.owner == owner
                )
            )

    # -- sandboxes ----------------------------------------------------------------------

    async def get_sandbox(self, tenant: str, sandbox_id: str) -> SandboxRecord | None:
        """Return a sandbox, or None."""
        async with self.db.read() as conn:
            row = (
                (
                    await conn.execute(
                        select(SandboxRow).where(
                            SandboxRow.tenant == tenant, SandboxRow.sandbox_id == sandbox_id
                        )
                    )
                )
                .mappings()
                .first()
            )
        if row is None:
            return None
        return SandboxRecord(
            row["tenant"],
            row["sandbox_id"],
            row["backend"],
            row["state"],
            row["workspace"],
            row["owns_workspace"],
            row["settings_json"],
            row["fingerprint"],
        )

    async def put_sandbox(self, rec: SandboxRecord) -> None:
        """Insert or replace a sandbox."""
        now = utcnow()
        values = dict(
            backend=rec.backend,
            state=rec.state,
            workspace=rec.workspace,
            owns_workspace=rec.owns_workspace,
            settings_json=rec.settings_json,
            fingerprint=rec.fingerprint,
            updated_at=now,
        )
        where = (SandboxRow.tenant == rec.tenant, SandboxRow.sandbox_id == rec.sandbox_id)
        async with self.db.write() as conn:
            result = await conn.execute(update(SandboxRow).where(*where).values(**values))
            if not result.rowcount:
                await conn.execute(
                    insert(SandboxRow).values(
                        tenant=rec.tenant, sandbox_id=rec.sandbox_id, created_at=now, **values
                    )
                )

    async def set_sandbox_state(self, tenant: str, sandbox_id: str, state: str) -> bool:
        """Set a sandbox's state; False when it does not exist."""
        async with self.db.write() as conn:
            result = await conn.execute(
                update(SandboxRow)
                .where(SandboxRow.tenant == tenant, SandboxRow.sandbox_id == sandbox_id)
                .values(state=state, updated_at=utcnow())
            )
        return bool(result.rowcount)

    async def delete_sandbox(self, tenant: str, sandbox_id: str) -> bool:
        """Delete a sandbox; False when it did not exist."""
        async with self.db.write() as conn:
            result = await conn.execute(
                delete(SandboxRow).where(SandboxRow.tenant == tenant, SandboxRow.sandbox_id == sandbox_id)
            )
        return bool(result.rowcount)
