"""SessionService servicer: proto <-> domain and nothing else.

Every method reads the caller's tenant from the call context, converts the request with
`codec`, calls the `SessionStore`, and converts the answer back. Errors are MeshErrors
raised by the codec or the store; the mesh interceptor maps them to gRPC status +
ErrorInfo. Statuses every method can return besides its own: INVALID_ARGUMENT/
MISSING_FIELD (no session id), INVALID_ARGUMENT/INVALID_ID (malformed id),
NOT_FOUND/SESSION_NOT_FOUND (unknown id, or another tenant's), NOT_FOUND/STALE_GENERATION
(the generation named is not the current one).

Metrics (`SessionMetrics`, mesh/telemetry/metrics.py): every AppendEntries by outcome ("ok",
"seq_mismatch" for a lost compare-and-set, "refused" for any other refusal), the entries
written, and the WatchSession streams open.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import grpc

from agentrt.core.errors import MeshError, Reason, invalid
from agentrt.mesh.calls import CallContext, CallsMethod, serve_calls
from agentrt.mesh.context import current_tenant
from agentrt.mesh.telemetry.metrics import SessionMetrics
from agentrt.sessions import codec
from agentrt.sessions.storage.store import SessionStore
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc

_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}\Z")


class SessionServicer(pb_grpc.SessionServiceServicer):
    """SessionService over a `SessionStore` (see the module docstring)."""

    def __init__(self, store: SessionStore, metrics: SessionMetrics | None = None) -> None:
        """Serve `store`, counting into metrics (a private SessionMetrics when None)."""
        self._store = store
        self.metrics = metrics if metrics is not None else SessionMetrics()

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateSessionResponse:
        """Record a session (004 §2.5e).

        Raises INVALID_ARGUMENT (INVALID_ID, INVALID_VALUE), ALREADY_EXISTS/SESSION_EXISTS,
        NOT_FOUND/SESSION_NOT_FOUND (unknown parent).
        """
        info = await self._store.create(
            current_tenant(),
            request.session_id,
            hidden=request.hidden,
            parent_session_id=request.parent_session_id,
            title=request.title,
            metadata=dict(request.metadata),
        )
        return pb.CreateSessionResponse(session=codec.session_out(info))

    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        """Return one session with its last seq and entry count. Raises the common statuses."""
        info = await self._store.get(current_tenant(), codec.ref_in(request.session))
        return pb.GetSessionResponse(session=codec.session_out(info))

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        """List sessions newest change first (hidden ones only when asked).

        Raises INVALID_ARGUMENT/INVALID_VALUE (page_size outside 0..1000, bad page_token).
        """
        sessions, token = await self._store.list_sessions(
            current_tenant(),
            page_size=request.page_size,
            page_token=request.page_token,
            include_hidden=request.include_hidden,
        )
        return pb.ListSessionsResponse(
            sessions=[codec.session_out(s) for s in sessions], next_page_token=token
        )

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionResponse:
        """Delete a session, its entries and its hidden sessions atomically. Raises the common statuses."""
        removed = await self._store.delete(current_tenant(), codec.ref_in(request.session))
        return pb.DeleteSessionResponse(deleted_entries=removed)

    async def AppendEntries(
        self, request: pb.AppendEntriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendEntriesResponse:
        """Append entries in one transaction (004 §2.5, §2.5b, §2.5d).

        Raises INVALID_ARGUMENT (MISSING_FIELD for no entries, INVALID_VALUE for more than
        1,000, INVALID_ENTRY (also an enum value out of range), INVALID_JSON (also tool-call
        arguments that are not JSON), INVALID_ID, REQUEST_TOO_LARGE for an entry over 3 MiB
        or a write over 3.5 MiB;
        `field` names the entry), NOT_FOUND/ENTRY_NOT_FOUND (leaf
        move to an unknown entry), ABORTED/SEQ_MISMATCH (expected_last_seq moved),
        FAILED_PRECONDITION/USAGE_ALREADY_RECORDED (004 §2.7f).

        With include_tail, the answer also says what the log holds after the stored entries
        as of the write's commit: nothing, since every writer of a session mints its seqs
        under the session's lock (the append's transaction), so `tail` is empty and
        `tail_last_seq` is the last stored entry's seq; no read is made (decision 0057).
        """
        expected = request.expected_last_seq if request.HasField("expected_last_seq") else None
        tenant, ref = current_tenant(), codec.ref_in(request.session)
        try:
            stored, generation = await self._store.append(
                tenant, ref, codec.entries_in(list(request.entries)), expected
            )
        except MeshError as err:
            self.metrics.appends.labels(
                "seq_mismatch" if err.reason == Reason.SEQ_MISMATCH else "refused"
            ).inc()
            raise
        self.metrics.appends.labels("ok").inc()
        self.metrics.entries_appended.inc(len(stored))
        resp = pb.AppendEntriesResponse(entries=[codec.entry_out(e) for e in stored], generation=generation)
        if request.include_tail and stored:
            resp.tail_last_seq = stored[-1].seq
        return resp

    async def AppendEntriesCalls(
        self, requests: AsyncIterator[pb.AppendEntriesCallsRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AppendEntriesCallsResponse]:
        """Serve AppendEntries calls over one stream (mesh/calls.py; the run loop keeps one per run).

        Each call is answered exactly as AppendEntries answers it (its errors as CallError).
        """
        async for response in serve_calls(requests, context, self.append_calls()):
            yield response

    def append_calls(self) -> CallsMethod:
        """AppendEntries as a stream of calls' method (mesh/calls.py; mesh/local_calls.py in one process)."""

        async def handle(call: pb.AppendEntriesCallsRequest, ctx: CallContext) -> AsyncIterator[object]:
            yield await self.AppendEntries(call.request, ctx)  # type: ignore[arg-type]

        return CallsMethod(
            "agentrt.v1.SessionService",
            "AppendEntries",
            handle,
            lambda call_id, answer: pb.AppendEntriesCallsResponse(call_id=call_id, response=answer),
            lambda call_id, error: pb.AppendEntriesCallsResponse(call_id=call_id, error=error),
        )

    async def ListEntries(
        self, request: pb.ListEntriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEntriesResponse:
        """Read the raw log on a seq cursor.

        A page stops before its entries would exceed 3.5 MiB (at least one entry), so it may
        be shorter than `limit`; the caller continues with after_seq = the last seq returned
        while that is below `last_seq`. Raises INVALID_ARGUMENT/INVALID_VALUE for a
        negative after_seq.
        """
        entries, last_seq = await self._store.list_entries(
            current_tenant(), codec.ref_in(request.session), request.after_seq, request.limit
        )
        out, _ = codec.bounded_out(entries)
        return pb.ListEntriesResponse(entries=out, last_seq=last_seq)

    async def GetContext(
        self, request: pb.GetContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetContextResponse:
        """Read the context view (004 §2.5c), whole: never cut to fit a response.

        Raises INVALID_ARGUMENT/INVALID_VALUE for a negative after_seq,
        FAILED_PRECONDITION/CONTEXT_TOO_LARGE when the requested page exceeds 3.5 MiB (read
        it with a positive limit and after_seq).
        """
        entries, last_seq, leaf = await self._store.context(
            current_tenant(),
            codec.ref_in(request.session),
            request.after_seq,
            request.limit,
            include_unprojected=request.include_unprojected,
        )
        view = codec.context_out(entries)
        return pb.GetContextResponse(entries=view, last_seq=last_seq, leaf_entry_id=leaf)

    async def SwitchBranch(
        self, request: pb.SwitchBranchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SwitchBranchResponse:
        """Append a leaf move (004 §2.5d).

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_ENTRY for a leaf move
        as target), NOT_FOUND/ENTRY_NOT_FOUND.
        """
        entry = await self._store.switch_branch(
            current_tenant(), codec.ref_in(request.session), request.leaf_entry_id
        )
        return pb.SwitchBranchResponse(entry=codec.entry_out(entry))

    async def ForkSession(
        self, request: pb.ForkSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForkSessionResponse:
        """Copy a branch into a new session keeping entry ids (004 §2.5d).

        Raises NOT_FOUND/ENTRY_NOT_FOUND (unknown leaf), ALREADY_EXISTS/SESSION_EXISTS.
        """
        info = await self._store.fork(
            current_tenant(), codec.ref_in(request.session), request.leaf_entry_id, request.new_session_id
        )
        return pb.ForkSessionResponse(session=codec.session_out(info))

    async def ReplaceEntries(
        self, request: pb.ReplaceEntriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReplaceEntriesResponse:
        """Guarded atomic rewrite of the log (004 §2.5f, §2.5e2).

        Raises ABORTED/SEQ_MISMATCH (the last seq moved), INVALID_ARGUMENT/INVALID_ENTRY
        (leaf move, unknown or repeated carried-over id), the append's validation errors.
        """
        stored = await self._store.replace(
            current_tenant(),
            codec.ref_in(request.session),
            request.expected_last_seq,
            codec.entries_in(list(request.entries)),
        )
        return pb.ReplaceEntriesResponse(entries=[codec.entry_out(e) for e in stored])

    async def RecoverSession(
        self, request: pb.RecoverSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecoverSessionResponse:
        """Close dangling tool calls with a synthesized error output (004 §2.5h).

        Raises INVALID_ARGUMENT/INVALID_VALUE for a malformed retry-safe tool name.
        """
        for name in request.retry_safe_tools:
            if not _TOOL_NAME_RE.match(name):
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"retry_safe_tools holds a malformed name {name[:64]!r}",
                    field="retry_safe_tools",
                )
        stored = await self._store.recover(
            current_tenant(),
            codec.ref_in(request.session),
            list(request.retry_safe_tools),
            codec.interrupted_output,
        )
        return pb.RecoverSessionResponse(entries=[codec.entry_out(e) for e in stored])

    async def WatchSession(
        self, request: pb.WatchSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchSessionResponse]:
        """Stream the raw log after `after_seq`, then each appended entry, in seq order.

        The stream ends (OK) when the session is deleted or recreated. Raises
        INVALID_ARGUMENT/INVALID_VALUE for a negative after_seq, and the common statuses.
        """
        with self.metrics.watchers.track_inprogress():
            async for entry in self._store.watch(
                current_tenant(), codec.ref_in(request.session), request.after_seq
            ):
                yield pb.WatchSessionResponse(entry=codec.entry_out(entry))
