"""The session store's domain over SQL (004 §2.5–§2.5h); no grpc here.

Lifecycles, appends, branches, forks, guarded replace and recovery; the reads live in
`reads.py` (`SessionReads`, which `SessionStore` extends).

Every call takes the caller's tenant; a session of another tenant does not exist for it.
A session is addressed by `Ref` (id + generation, 0 = current); a ref naming a dead
incarnation is NOT_FOUND/STALE_GENERATION, so a handle to a deleted-and-recreated session
can neither read nor write the new one (004 §2.5e2).

One write is one transaction ("what must be one step", 004 §2.5e2): take the session
row's lock while proving it exists at the generation named and moving its change record
(`queries.claim`), compare the expected seq, read the append point (the last entry, which
also gives the active leaf), mint seqs from the never-deleted high-water mark, link
parents, insert. An append runs these steps as one database step (`appends`, then
`sql_postgres` — one call of the function `sessions_append` — or `sql_sqlite`; decision
0025); the other writes as SQLAlchemy transactions. The row lock serializes every writer of
a session on PostgreSQL; on SQLite, every write is one BEGIN IMMEDIATE transaction at a time. A delete locks
and removes the row before the entries, so a concurrent write either waits and then
fails NOT_FOUND, or committed first and is deleted with the rest. The unique positions
in `models` are the backstop; the serialization is what keeps the branch from forking.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from agentrt.core.errors import MeshError, Reason, Status, invalid, not_found, quote
from agentrt.core.ids import new_id, valid_id
from agentrt.sessions import tree
from agentrt.sessions.domain import (
    LEAF,
    Entry,
    Ref,
    SessionInfo,
    check_ref,
    check_session_fields,
    validate_entries,
)
from agentrt.sessions.storage import appends, sql_postgres, sql_sqlite
from agentrt.sessions.storage import queries as q
from agentrt.sessions.storage.appends import usage_key
from agentrt.sessions.storage.reads import SessionReads, _unavailable
from agentrt.sessions.storage.rows import session_from_row

#: Builds the synthesized output of a dangling tool call entry (004 §2.5h); the servicer
#: passes the codec's, since only the codec knows how an item is encoded.
OutputFactory = Callable[[Entry], Entry]


def _check_expected(expected: int | None) -> None:
    if expected is not None and expected < 0:
        raise invalid(
            Reason.INVALID_VALUE, "expected_last_seq must not be negative", field="expected_last_seq"
        )


def _taken(session_id: str) -> MeshError:
    return MeshError(
        Status.ALREADY_EXISTS,
        Reason.SESSION_EXISTS,
        f"session {quote(session_id)} already exists",
        {"session_id": session_id},
    )


class SessionStore(SessionReads):
    """Sessions and their entries in one database (see the module docstring).

    Reads (`get`, `list_sessions`, `list_entries`, `context`, `watch`) come from
    `SessionReads`; this class adds lifecycles and every write.
    """

    # -- lifecycles (004 §2.5e) -------------------------------------------------------------

    async def create(
        self,
        tenant: str,
        session_id: str = "",
        *,
        hidden: bool = False,
        parent_session_id: str = "",
        title: str = "",
        metadata: dict[str, str] | None = None,
    ) -> SessionInfo:
        """Record a new session; an empty session is listable.

        Args:
            tenant: the caller's tenant.
            session_id: the id to use; "" mints one.
            hidden: leave it out of listings by default (it serves `parent_session_id`).
            parent_session_id: the session it serves; must exist, is never created.
            title: human title, at most 1,000 characters.
            metadata: free string metadata, at most 64 KiB as JSON.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_ID or INVALID_VALUE, ALREADY_EXISTS/
                SESSION_EXISTS, NOT_FOUND/SESSION_NOT_FOUND (unknown parent).
        """
        metadata = dict(metadata or {})
        if session_id and not valid_id(session_id):
            raise invalid(Reason.INVALID_ID, "session_id is malformed", field="session_id")
        if parent_session_id and not valid_id(parent_session_id):
            raise invalid(Reason.INVALID_ID, "parent_session_id is malformed", field="parent_session_id")
        check_session_fields(title, metadata)
        minted = not session_id
        session_id = session_id or new_id("ses")
        try:
            # One transaction in one hop (inline on the loop's thread on SQLite, as an
            # append): a run's start waits for it. The body awaits only the connection.
            return await self._run(
                lambda conn: self._create(
                    conn, tenant, session_id, hidden, parent_session_id, title, metadata, minted
                ),
                write=True,
            )
        except IntegrityError:
            raise _taken(session_id) from None

    async def _create(
        self,
        conn: AsyncConnection,
        tenant: str,
        session_id: str,
        hidden: bool,
        parent: str,
        title: str,
        metadata: dict[str, str],
        minted: bool = False,
    ) -> SessionInfo:
        """Insert the session in `conn`'s transaction.

        `minted`: its id was minted by this call; a new id has no row and no marks, so
        neither is looked up.
        """
        parent_gen = 0
        if parent:
            # Locked, so a delete of the parent cannot miss a child created meanwhile.
            parent_row = await q.row(conn, tenant, parent, lock=True)
            if parent_row is None:
                raise q.no_session(parent, "parent_session_id")
            parent_gen = parent_row["generation"]
        if not minted and await q.row(conn, tenant, session_id) is not None:
            raise _taken(session_id)
        now = self._now_us()
        values = {
            "tenant": tenant,
            "session_id": session_id,
            "generation": await q.mint_generation(conn, tenant, session_id, first=minted),
            "hidden": hidden,
            "parent_session_id": parent,
            "parent_generation": parent_gen,
            "title": title,
            "metadata": metadata,
            "create_time_us": now,
            "update_time_us": now,
        }
        await q.insert_session(conn, values)
        return session_from_row(dict(values, metadata_json=json.dumps(metadata)))

    async def delete(self, tenant: str, ref: Ref) -> int:
        """Delete a session, its entries and the hidden sessions serving it (any depth), in one step.

        Returns:
            The number of entries removed.

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref), NOT_FOUND/SESSION_NOT_FOUND or STALE_GENERATION.
        """
        check_ref(ref)
        removed, gone = 0, []
        async with self._tx(write=True) as conn:
            row = await q.resolve(conn, tenant, ref, lock=True)
            todo = [(row["session_id"], row["generation"])]
            while todo:
                session_id, gen = todo.pop()
                count, children = await q.delete_session(conn, tenant, session_id, gen)
                removed += count
                gone.append(session_id)
                todo.extend(children)
        for session_id in gone:
            self._notifier.notify(tenant, session_id)
        return removed

    # -- writes (004 §2.5, §2.5b, §2.5d, §2.5f) ----------------------------------------------

    async def _write(
        self,
        conn: AsyncConnection,
        tenant: str,
        session: q.Row,
        batch: Sequence[Entry],
        leaf: str,
        keep: bool,
    ) -> list[Entry]:
        """Mint seqs (and ids unless kept), link parents from `leaf`, insert."""
        base = await q.mint_seqs(conn, tenant, session["session_id"], len(batch))
        now = self._now_us()
        minted = [
            dataclasses.replace(
                e,
                seq=base + i + 1,
                entry_id=e.entry_id if keep and e.entry_id else new_id("ent"),
                create_time_us=e.create_time_us if keep and e.create_time_us else now,
            )
            for i, e in enumerate(batch)
        ]
        linked, _ = tree.link(leaf, minted)
        await q.insert_entries(conn, tenant, session, linked)
        return linked

    async def append(
        self, tenant: str, ref: Ref, entries: list[Entry], expected_last_seq: int | None = None
    ) -> tuple[list[Entry], int]:
        """Append entries in one transaction; storage assigns seq, id, parent and time.

        Args:
            tenant: the caller's tenant.
            ref: the session (generation 0 = current).
            entries: 1..1,000 entries in order.
            expected_last_seq: when set, append only while the highest stored seq equals it.

        Returns:
            (the stored entries in order, the generation that took the write).

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref or entry, see `validate_entries`),
                NOT_FOUND/SESSION_NOT_FOUND, NOT_FOUND/STALE_GENERATION,
                NOT_FOUND/ENTRY_NOT_FOUND (a leaf move to an unknown entry),
                ABORTED/SEQ_MISMATCH (expected_last_seq moved),
                FAILED_PRECONDITION/USAGE_ALREADY_RECORDED (004 §2.7f).
        """
        check_ref(ref)
        validate_entries(entries)
        _check_expected(expected_last_seq)
        _check_usage_in_batch(entries)
        prepared = appends.prepare(entries, self._now_us())
        try:
            if self._db.is_sqlite:
                body = sql_sqlite.append(tenant, ref, expected_last_seq, prepared)
                stored, generation = await self._db.write_sync(body)
            else:
                stored, generation = await sql_postgres.append(
                    self._db, tenant, ref, expected_last_seq, prepared
                )
        except (OperationalError, InterfaceError, *sql_postgres.UNAVAILABLE) as exc:
            raise _unavailable(exc) from exc
        self._notifier.notify(tenant, ref.session_id)
        return stored, generation

    async def replace(
        self, tenant: str, ref: Ref, expected_last_seq: int, entries: list[Entry]
    ) -> list[Entry]:
        """Swap the whole log for `entries` while the highest seq still matches (004 §2.5f).

        The comparison with expected_last_seq (0 for an empty log) and the write are one step.

        Carried-over entries keep their entry_id (it must name an entry stored now) and take
        fresh seqs; seqs continue from the high-water mark, never restarting (004 §2.5e2).
        The new log is one straight line, so leaf moves are refused. No entries = clear.

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref or entry, leaf move, unknown or repeated
                carried-over id), NOT_FOUND (session or generation), ABORTED/SEQ_MISMATCH.
        """
        check_ref(ref)
        validate_entries(entries, allow_empty=True)
        _check_expected(expected_last_seq)
        _check_usage_in_batch(entries)
        for index, entry in enumerate(entries):
            where = f"entries[{index}]"
            if entry.kind == LEAF:
                raise invalid(
                    Reason.INVALID_ENTRY, f"{where}: a replaced log is one line; no leaf moves", field=where
                )
            if entry.entry_id and not valid_id(entry.entry_id):
                raise invalid(Reason.INVALID_ID, f"{where}.entry_id is malformed", field=f"{where}.entry_id")
        kept = [e.entry_id for e in entries if e.entry_id]
        if len(kept) != len(set(kept)):
            raise invalid(Reason.INVALID_ENTRY, "a carried-over entry_id appears twice", field="entries")
        return await self._replace_guarded(tenant, ref, expected_last_seq, entries)

    async def _replace_guarded(
        self, tenant: str, ref: Ref, expected: int, entries: list[Entry]
    ) -> list[Entry]:
        """ReplaceEntries' transaction (an append is `appends` + `sql_sqlite`/`sql_postgres`)."""

        async def body(conn: AsyncConnection) -> tuple[list[Entry], q.Row]:
            # The transaction body: it awaits only the connection (see SessionReads._run).
            session = await q.claim(conn, tenant, ref, self._now_us())
            last = await q.tail(conn, tenant, session)
            last_seq = last.seq if last is not None else 0
            if expected != last_seq:
                raise appends.refusal(appends.SEQ_MISMATCH, ref, expected, 0, last_seq, "", 0, "")
            await self._check_kept(conn, tenant, session, entries)
            await q.delete_entries(conn, tenant, session["session_id"], session["generation"])
            stored = await self._write(conn, tenant, session, entries, "", keep=True)
            return stored, session

        try:
            stored, _ = await self._run(body, write=True)
        except IntegrityError:
            # The unique positions are the backstop; the row lock makes this unreachable.
            raise appends.lost_race() from None
        self._notifier.notify(tenant, ref.session_id)
        return stored

    async def _check_kept(
        self, conn: AsyncConnection, tenant: str, session: q.Row, entries: Sequence[Entry]
    ) -> None:
        kept = {e.entry_id for e in entries if e.entry_id}
        unknown = sorted(kept - set(await q.kinds_of(conn, tenant, session, kept)))
        if unknown:
            raise invalid(
                Reason.INVALID_ENTRY,
                f"entry_id {quote(unknown[0])} is not stored in this session; only carried-over entries "
                "keep an id",
                field="entries",
            )

    async def switch_branch(self, tenant: str, ref: Ref, leaf_entry_id: str) -> Entry:
        """Move the active leaf by appending a leaf-move entry (004 §2.5d).

        Raises:
            MeshError: INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_ENTRY for a leaf
                move as target), NOT_FOUND (session, generation, ENTRY_NOT_FOUND).
        """
        if not leaf_entry_id:
            raise invalid(Reason.MISSING_FIELD, "leaf_entry_id is required", field="leaf_entry_id")
        if not valid_id(leaf_entry_id):
            raise invalid(Reason.INVALID_ID, "leaf_entry_id is malformed", field="leaf_entry_id")
        stored, _ = await self.append(tenant, ref, [Entry(kind=LEAF, leaf_entry_id=leaf_entry_id)])
        return stored[0]

    async def fork(
        self, tenant: str, ref: Ref, leaf_entry_id: str = "", new_session_id: str = ""
    ) -> SessionInfo:
        """Copy a branch into a new session in one transaction, keeping entry ids (004 §2.5d).

        The branch ends at leaf_entry_id ("" = the active leaf); creation times are kept too.

        The new session is visible, takes the source's title and metadata; its entries take
        fresh seqs and are linked as one straight line.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_ID, NOT_FOUND (session, generation, or
                ENTRY_NOT_FOUND for the leaf), ALREADY_EXISTS/SESSION_EXISTS.
        """
        check_ref(ref)
        for name, value in (("leaf_entry_id", leaf_entry_id), ("new_session_id", new_session_id)):
            if value and not valid_id(value):
                raise invalid(Reason.INVALID_ID, f"{name} is malformed", field=name)
        new_session_id = new_session_id or new_id("ses")
        try:
            async with self._tx(write=True) as conn:
                source = await q.resolve(conn, tenant, ref)
                log = await q.log(conn, tenant, source)
                if leaf_entry_id and not any(e.entry_id == leaf_entry_id and e.kind != LEAF for e in log):
                    raise not_found(
                        Reason.ENTRY_NOT_FOUND,
                        f"entry {quote(leaf_entry_id)} not found",
                        entry_id=leaf_entry_id,
                    )
                path = tree.branch(log, leaf_entry_id or None)
                metadata = json.loads(source["metadata_json"] or "{}")
                info = await self._create(conn, tenant, new_session_id, False, "", source["title"], metadata)
                target = await q.row(conn, tenant, new_session_id)
                stored = await self._write(conn, tenant, target, path, "", keep=True)
        except IntegrityError:
            raise _taken(new_session_id) from None
        return dataclasses.replace(info, last_seq=stored[-1].seq if stored else 0, entry_count=len(stored))

    async def recover(
        self, tenant: str, ref: Ref, retry_safe_tools: Sequence[str], make_output: OutputFactory
    ) -> list[Entry]:
        """Close each dangling tool call on the active branch with an error output (004 §2.5h).

        Calls to retry-safe tools are left for a re-run. Idempotent; a no-op writes nothing.

        Args:
            tenant: the caller's tenant.
            ref: the session.
            retry_safe_tools: tool names whose dangling calls are left for a re-run.
            make_output: builds the output entry of one dangling call entry.

        Returns:
            The appended outputs, in the branch order of their calls (empty when none dangle).

        Raises:
            MeshError: INVALID_ARGUMENT (bad ref), NOT_FOUND (session or generation).
        """
        check_ref(ref)
        safe = set(retry_safe_tools)
        async with self._tx(write=True) as conn:
            session = await q.resolve(conn, tenant, ref, lock=True)
            log = await q.log(conn, tenant, session)
            # A call is dangling when its branch holds no output for it, and also when the
            # context view (what the model reads) shows the call but a compaction folded its
            # output away: either way the model would read a call without its output.
            dangling = {c.call_id: c for c in tree.dangling_calls(tree.context_view(log))}
            dangling.update((c.call_id, c) for c in tree.dangling_calls(tree.branch(log)))
            calls = sorted((c for c in dangling.values() if c.tool_name not in safe), key=lambda c: c.seq)
            if not calls:
                return []
            session = await q.claim(conn, tenant, ref, self._now_us())
            stored = await self._write(
                conn, tenant, session, [make_output(c) for c in calls], tree.current_leaf(log), keep=False
            )
        self._notifier.notify(tenant, ref.session_id)
        return stored


def _check_usage_in_batch(entries: Sequence[Entry]) -> None:
    # 004 §2.7f: one entry per response carries its usage; a second would double the bill.
    seen: set[tuple[str, int, str]] = set()
    for index, entry in enumerate(entries):
        if entry.usage is None or not entry.response_id:
            continue
        key = usage_key(entry)
        if key in seen:
            raise invalid(
                Reason.INVALID_ENTRY,
                f"entries[{index}]: usage of response {quote(entry.response_id)} is already on another entry",
                field=f"entries[{index}].usage",
            )
        seen.add(key)
