"""The run loop's calls to the session store (SessionService).

A turn's AppendEntries goes over the run's stream of calls when there is one
(runs/peers/streams.py), else as its own RPC; both are fenced by `expected_last_seq`.

A run holds its session by generation (004 §2.5e2: a handle to a deleted session neither
reads nor writes its replacement). The executor sets `RUN_SESSION` (its session's id and the
generation it started on, decision 0058) for its task and the tasks it starts, and every
call here that names that session carries the generation: after a delete, or a delete and
a create of the same id, the store answers NOT_FOUND (SESSION_NOT_FOUND, STALE_GENERATION)
and the run fails instead of writing into the replacement.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence

from agentrt.runs.peers import streams
from agentrt.runs.peers.base import SESSION_CALL_TIMEOUT_S, PeerBase, meta
from agentrt.runs.peers.streams import NOT_SENT, SESSIONS
from agentrt.v1 import session_service_pb2 as spb

#: The run state key of the generation a run holds its session by (absent: an older run, unpinned).
SESSION_GENERATION = "session_generation"
#: (session id, generation) of the run whose executor's task this is; None: no run's.
RUN_SESSION: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "agentrt_run_session", default=None
)


def session_ref(session_id: str) -> spb.SessionRef:
    """The ref of `session_id`: with the run's generation when it is the current run's session."""
    held = RUN_SESSION.get()
    if held is not None and held[0] == session_id and held[1] > 0:
        return spb.SessionRef(session_id=session_id, generation=held[1])
    return spb.SessionRef(session_id=session_id)


class SessionCalls(PeerBase):
    """Typed calls to the session store."""

    async def create_session(self, tenant: str, title: str = "") -> spb.Session:
        """Create a session; return it (its id and generation)."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.CreateSession(
                spb.CreateSessionRequest(title=title),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return resp.session

    async def create_hidden_session(
        self, tenant: str, parent_session_id: str, title: str = ""
    ) -> spb.Session:
        """Create a hidden session serving parent_session_id (a child run's, 004 §2.8); return it."""
        req = spb.CreateSessionRequest(hidden=True, parent_session_id=parent_session_id, title=title)
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.CreateSession(
                req, metadata=meta(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
        )
        return resp.session

    async def get_session(self, tenant: str, session_id: str) -> spb.Session:
        """Return the session. Raises the session service's NOT_FOUND/SESSION_NOT_FOUND."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.GetSession(
                spb.GetSessionRequest(session=session_ref(session_id)),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return resp.session

    async def context(self, tenant: str, session_id: str) -> tuple[list[spb.Entry], int, str]:
        """Return (the session's context entries in order, its last seq, the active leaf id)."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.GetContext(
                spb.GetContextRequest(session=session_ref(session_id)),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return list(resp.entries), resp.last_seq, resp.leaf_entry_id

    async def tail(self, tenant: str, session_id: str, after_seq: int) -> tuple[list[spb.Entry], int]:
        """Return (the raw log entries after a seq, in seq order; the highest seq stored)."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.ListEntries(
                spb.ListEntriesRequest(session=session_ref(session_id), after_seq=after_seq),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return list(resp.entries), resp.last_seq

    async def entries_after(self, tenant: str, session_id: str, after_seq: int) -> list[spb.Entry]:
        """Return the raw log entries after a seq."""
        return (await self.tail(tenant, session_id, after_seq))[0]

    async def append(
        self, tenant: str, session_id: str, entries: Sequence[spb.Entry], expected_last_seq: int | None
    ) -> list[spb.Entry]:
        """Append entries in one call (one transaction in the store); return them stored.

        Raises:
            MeshError: ABORTED/SEQ_MISMATCH when expected_last_seq no longer holds; the
                store's other errors.
        """
        return (await self.append_with_tail(tenant, session_id, entries, expected_last_seq, False))[0]

    async def append_with_tail(
        self,
        tenant: str,
        session_id: str,
        entries: Sequence[spb.Entry],
        expected_last_seq: int | None,
        include_tail: bool = True,
    ) -> tuple[list[spb.Entry], tuple[list[spb.Entry], int] | None]:
        """Append entries as `append` does; with include_tail, also learn the log after them.

        Returns:
            (the stored entries; (the raw log entries after the last stored one, in seq
            order, the highest seq stored) as of the commit (decision 0057: no entries), or
            None when the store did not answer them: not asked, or an older store, so the
            caller reads).

        Raises:
            MeshError: as `append`.
        """
        req = spb.AppendEntriesRequest(
            session=session_ref(session_id), entries=entries, include_tail=include_tail
        )
        if expected_last_seq is not None:
            req.expected_last_seq = expected_last_seq
        # Fenced by expected_last_seq, a batch sent twice (gRPC's retry policy on this
        # channel, FENCED_METHODS; the run's stream of calls, runs/peers/streams.py) is refused
        # (SEQ_MISMATCH), never doubled.
        resp = await streams.send(SESSIONS, req, timeout=SESSION_CALL_TIMEOUT_S, ready=self._ready)
        if resp is NOT_SENT:
            resp = await self._call(
                "sessions",
                lambda: self.client.session_service.AppendEntries(
                    req, metadata=meta(tenant), timeout=SESSION_CALL_TIMEOUT_S
                ),
            )
        tail = (list(resp.tail), resp.tail_last_seq) if resp.tail_last_seq else None
        return list(resp.entries), tail

    async def recover(self, tenant: str, session_id: str, retry_safe_tools: Sequence[str]) -> list[spb.Entry]:
        """Close the dangling tool calls of the session's active branch (004 §2.5h).

        Returns:
            The synthesized outputs appended (empty when nothing dangled). Idempotent: a
            second call appends nothing, so re-sending it is safe.
        """
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.RecoverSession(
                spb.RecoverSessionRequest(
                    session=session_ref(session_id), retry_safe_tools=list(retry_safe_tools)
                ),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return list(resp.entries)

    async def switch_branch(self, tenant: str, session_id: str, leaf_entry_id: str) -> spb.Entry:
        """Make leaf_entry_id the session's active leaf; return the leaf-move entry.

        Not re-sent after a transport failure that may have reached the store (a second
        leaf move to the same leaf would be harmless, but the caller re-reads anyway).
        """
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.SwitchBranch(
                spb.SwitchBranchRequest(session=session_ref(session_id), leaf_entry_id=leaf_entry_id),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return resp.entry
