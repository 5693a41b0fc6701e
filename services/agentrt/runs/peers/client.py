"""The run loop's door to its peers: gateway, tool service, session store (over gRPC).

The only module of the run loop that touches grpc. Every call goes over the long-lived
channels of one `MeshClient`, carries the run's tenant in metadata, and a failed call is
re-raised as the peer's `MeshError` (status and reason preserved), so the loop and the
servicer pass a peer's NOT_FOUND/SESSION_NOT_FOUND on unchanged.

Reaching a peer is gRPC's job (decision 0004, issue 13): the channels are `MeshClient`'s
with `wait_for_ready` and the fenced retry policy (`client.channels.FENCED_METHODS`). A peer
that is not up yet (a restart brings the services up in any order, and a takeover can
resume a run ~ms before its tool service serves) is waited for by the channel's own
connectivity (`channel_ready()`) for up to `unavailable_s` seconds, then the call fails
UNAVAILABLE/DEPENDENCY_UNAVAILABLE. Each call is then sent once with its deadline; gRPC's
retry policy re-sends, on another replica, what is safe to send twice (reads, ExecuteTool
journaled by run_id + call_id, the run loop's fenced AppendEntries) when a replica fails it
with UNAVAILABLE, and its transparent retry re-sends any call that never left the client.
A model call (Generate, StreamGenerate) goes once, with a deadline: an unkeyed one is never
re-sent, since a provider would answer and bill twice. A keyed one (the run loop's turns:
runs/loop/turn.py `model_call_key`) is re-sent up to MODEL_RESENDS times when its gateway
replica went away (UNAVAILABLE below any server): the gateway's model-call journal answers
the repeat without asking twice (decision 0019); the repeat's deltas are dropped when
the caller already had some (a judge's keyed Generate, `judge_call_key`, goes once: the
journal answers the next owner's). A keyed call the gateway refuses UNAVAILABLE/DEPENDENCY_UNAVAILABLE (its
limiter or journal store did not answer within the call's admission wait: nothing was asked)
is waited out like an unreachable peer, re-sent with its key for up to `unavailable_s`
seconds (decision 0021-slow-shared-stores). A keyed call the loop stops on purpose (CancelRun, a tripwire)
is followed by CancelGenerate, so the gateway stops the provider call rather than letting it
outlive its caller; one cut because the replica lost the run's lease, or drains, is not: the
next owner's repeat needs it running or journaled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import from_rpc_error, reason_of
from agentrt.runs.peers import streams
from agentrt.runs.peers.streams import GATEWAY, NOT_SENT, SESSIONS, TOOLS
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import tool_service_pb2 as tpb

SESSION_CALL_TIMEOUT_S = 30.0
#: Deadline of CreateSandbox / DestroySandbox, seconds (a container starts or is removed).
SANDBOX_CALL_TIMEOUT_S = 120.0
CATALOG_TTL_S = 30.0
#: Deadline of one model call, seconds: above the gateway's own provider-call cap
#: (AGENTRT_GATEWAY_TIMEOUT_SECONDS, 600) so the gateway's answer, not ours, ends a slow call.
MODEL_CALL_TIMEOUT_S = 660.0

#: Re-sends of a StreamExecuteTool cut after its first message (gRPC's policy cannot: a
#: stream is committed once a response arrived).
STREAM_RESENDS = 4
#: Re-sends of a keyed StreamGenerate whose gateway replica went away (killed, restarted).
MODEL_RESENDS = 3
#: Pause before re-sending a keyed model call the gateway refused DEPENDENCY_UNAVAILABLE
#: without RetryInfo, seconds.
DEPENDENCY_WAIT_S = 1.0

T = TypeVar("T")

#: CancelGenerate calls in flight (kept referenced until done).
_CANCELS: set[asyncio.Task[None]] = set()


def _dependency_wait(err: MeshError) -> bool:
    """True for a gateway refusal that asked nothing and is worth waiting out (its stores)."""
    return err.status == Status.UNAVAILABLE and err.reason == Reason.DEPENDENCY_UNAVAILABLE


def _transport_failure(err: grpc.aio.AioRpcError) -> bool:
    """True when the call failed below any server (UNAVAILABLE with no ErrorInfo reason)."""
    return err.code() == grpc.StatusCode.UNAVAILABLE and not reason_of(err)


def _md(tenant: str) -> list[tuple[str, str]]:
    return [(TENANT_HEADER, tenant)]


class Peers:
    """Typed calls to the gateway, tools and sessions (see the module docstring)."""

    def __init__(
        self,
        client: MeshClient,
        tool_grace_s: float = 30.0,
        unavailable_s: float = 30.0,
        model_timeout_s: float = MODEL_CALL_TIMEOUT_S,
    ) -> None:
        """Wrap a MeshClient whose gateway, tools and sessions addresses are set.

        Args:
            client: the long-lived channels (open them with wait_for_ready=True and
                fenced=True: see the module docstring).
            tool_grace_s: added to a tool's own timeout for the ExecuteTool deadline, seconds.
            unavailable_s: how long a call waits for an unreachable peer, seconds (0 = no wait).
            model_timeout_s: deadline of one model call, seconds.
        """
        self.client = client
        self._tool_grace_s = tool_grace_s
        self._unavailable_s = unavailable_s
        self._model_timeout_s = model_timeout_s
        #: Calls that found their peer unreachable and waited for it (operators and tests).
        self.unavailable_waits = 0
        self._catalog: dict[str, cpb.ToolSpec] = {}
        self._catalog_time = 0.0

    async def close(self) -> None:
        """Close the channels."""
        await self.client.close()

    async def _ready(self, peer: str) -> None:
        """Wait until the peer's channel has a READY replica, for up to `unavailable_s` seconds.

        Raises:
            MeshError: UNAVAILABLE/DEPENDENCY_UNAVAILABLE when none became READY in time.
        """
        channel = self.client.channel(peer)
        if channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
            return
        self.unavailable_waits += 1
        try:
            await asyncio.wait_for(channel.channel_ready(), self._unavailable_s)
        except TimeoutError:
            raise MeshError(
                Status.UNAVAILABLE,
                Reason.DEPENDENCY_UNAVAILABLE,
                f"the {peer} service stayed unreachable for {self._unavailable_s:g}s",
            ) from None

    async def _call(self, peer: str, send: Callable[[], Awaitable[T]]) -> T:
        """Send a unary call once, when the peer is reachable (see the module docstring).

        Raises:
            MeshError: the peer's error; UNAVAILABLE/DEPENDENCY_UNAVAILABLE when the peer
                stayed unreachable for `unavailable_s` seconds, or failed the call at the
                transport and gRPC's policy could not (or must not) re-send it.
        """
        await self._ready(peer)
        try:
            return await send()
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err

    async def catalog(self, tenant: str) -> dict[str, cpb.ToolSpec]:
        """Return the tool catalog by name (cached for CATALOG_TTL_S seconds).

        Raises:
            MeshError: the tool service's error (UNAVAILABLE when it is down).
        """
        if self._catalog and time.monotonic() - self._catalog_time < CATALOG_TTL_S:
            return self._catalog
        resp = await self._call(
            "tools",
            lambda: self.client.tool_service.ListTools(
                tpb.ListToolsRequest(), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
        )
        self._catalog = {t.name: t for t in resp.tools}
        self._catalog_time = time.monotonic()
        return self._catalog

    async def create_sandbox(self, tenant: str, request: tpb.CreateSandboxRequest) -> tpb.Sandbox:
        """Create or adopt a run's sandbox (idempotent on its id and settings, 004 §2.7n).

        Raises:
            MeshError: the tool service's error (INVALID_ARGUMENT, FAILED_PRECONDITION
                SANDBOX_UNAVAILABLE or SANDBOX_FOREIGN, UNAVAILABLE when it is down).
        """
        resp = await self._call(
            "tools",
            lambda: self.client.tool_service.CreateSandbox(
                request, metadata=_md(tenant), timeout=SANDBOX_CALL_TIMEOUT_S
            ),
        )
        return resp.sandbox

    async def destroy_sandbox(self, tenant: str, sandbox_id: str) -> None:
        """Destroy a sandbox: its commands, its container, a workspace the tool service made.

        Raises:
            MeshError: the tool service's error (NOT_FOUND/SANDBOX_NOT_FOUND when it is gone).
        """
        await self._call(
            "tools",
            lambda: self.client.tool_service.DestroySandbox(
                tpb.DestroySandboxRequest(sandbox_id=sandbox_id),
                metadata=_md(tenant),
                timeout=SANDBOX_CALL_TIMEOUT_S,
            ),
        )

    async def create_session(self, tenant: str, title: str = "") -> str:
        """Create a session; return its id."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.CreateSession(
                spb.CreateSessionRequest(title=title), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
        )
        return resp.session.session_id

    async def create_hidden_session(self, tenant: str, parent_session_id: str, title: str = "") -> str:
        """Create a hidden session serving parent_session_id (a child run's, 004 §2.8); return its id."""
        req = spb.CreateSessionRequest(hidden=True, parent_session_id=parent_session_id, title=title)
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.CreateSession(
                req, metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
        )
        return resp.session.session_id

    async def get_session(self, tenant: str, session_id: str) -> spb.Session:
        """Return the session. Raises the session service's NOT_FOUND/SESSION_NOT_FOUND."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.GetSession(
                spb.GetSessionRequest(session=spb.SessionRef(session_id=session_id)),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return resp.session

    async def context(self, tenant: str, session_id: str) -> tuple[list[spb.Entry], int, str]:
        """Return (the session's context entries in order, its last seq, the active leaf id)."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.GetContext(
                spb.GetContextRequest(session=spb.SessionRef(session_id=session_id)),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return list(resp.entries), resp.last_seq, resp.leaf_entry_id

    async def tail(self, tenant: str, session_id: str, after_seq: int) -> tuple[list[spb.Entry], int]:
        """Return (the raw log entries after a seq, in seq order; the highest seq stored)."""
        resp = await self._call(
            "sessions",
            lambda: self.client.session_service.ListEntries(
                spb.ListEntriesRequest(session=spb.SessionRef(session_id=session_id), after_seq=after_seq),
                metadata=_md(tenant),
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
        """Append entries as `append` does; with include_tail, also read the log after them.

        Returns:
            (the stored entries; (the raw log entries after the last stored one, in seq
            order, the highest seq stored) as read just after the commit, or None when the
            store did not read them: not asked, or not answered, so the caller reads).

        Raises:
            MeshError: as `append`.
        """
        req = spb.AppendEntriesRequest(
            session=spb.SessionRef(session_id=session_id), entries=entries, include_tail=include_tail
        )
        if expected_last_seq is not None:
            req.expected_last_seq = expected_last_seq
        # Fenced by expected_last_seq, a batch sent twice (gRPC's retry policy on this
        # channel, FENCED_METHODS; the run's stream of calls, runs/peer_calls.py) is refused
        # (SEQ_MISMATCH), never doubled.
        resp = await streams.send(SESSIONS, req, timeout=SESSION_CALL_TIMEOUT_S, ready=self._ready)
        if resp is NOT_SENT:
            resp = await self._call(
                "sessions",
                lambda: self.client.session_service.AppendEntries(
                    req, metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
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
                    session=spb.SessionRef(session_id=session_id), retry_safe_tools=list(retry_safe_tools)
                ),
                metadata=_md(tenant),
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
                spb.SwitchBranchRequest(
                    session=spb.SessionRef(session_id=session_id), leaf_entry_id=leaf_entry_id
                ),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return resp.entry

    async def generate_once(
        self, tenant: str, request: gpb.ModelRequest, stops_call: Callable[[], bool] | None = None
    ) -> gpb.GenerateResponse:
        """One blocking model call (Generate): compaction summaries, model guardrails' judges.

        A keyed call cancelled here is stopped at the gateway too (CancelGenerate) only when
        `stops_call` is given and says the run itself ends it (a fail-fast stage, a tripwire,
        CancelRun); None (compaction) or False (a lost lease, a drain) leaves it running for
        the next owner's repeat, which the gateway's journal answers (decision 0019).

        Raises:
            MeshError: the gateway's error.
        """
        try:
            return await self._call(
                "gateway",
                lambda: self.client.gateway_service.Generate(
                    gpb.GenerateRequest(request=request), metadata=_md(tenant), timeout=self._model_timeout_s
                ),
            )
        except asyncio.CancelledError:
            if request.idempotency_key and stops_call is not None and stops_call():
                self._cancel_model_call(tenant, request.idempotency_key)
            raise

    async def count_tokens(self, tenant: str, request: gpb.ModelRequest) -> int:
        """Count a request's input tokens (CountTokens).

        Raises:
            MeshError: FAILED_PRECONDITION/TOKEN_COUNTING_UNSUPPORTED where the provider cannot.
        """
        resp = await self._call(
            "gateway",
            lambda: self.client.gateway_service.CountTokens(
                gpb.CountTokensRequest(request=request), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            ),
        )
        return int(resp.input_tokens)

    async def cancel_execution(
        self, tenant: str, run_id: str, call_id: str, attempt: int, reason: str
    ) -> tpb.CancelExecutionResponse:
        """Kill a call the tool service runs (or journal it never-started); see CancelExecution."""
        return await self._call(
            "tools",
            lambda: self.client.tool_service.CancelExecution(
                tpb.CancelExecutionRequest(
                    run_id=run_id, call_id=call_id, attempt=attempt, reason=reason[:256]
                ),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )

    async def generate(
        self,
        tenant: str,
        request: gpb.ModelRequest,
        on_wait: Callable[[MeshError, float], None] | None = None,
        stops_call: Callable[[], bool] | None = None,
    ) -> AsyncIterator[gpb.StreamGenerateResponse]:
        """Stream one model call; yields deltas then the final response.

        A keyed call cancelled here is stopped at the gateway too (CancelGenerate) only when
        `stops_call()` says the run itself ends it (CancelRun, a tripwire; None: always).
        A run that lost its lease or drains hands the call to the run's next owner, whose
        repeat (same key) must find it running or journaled, not released and asked again.

        A keyed call the gateway refused UNAVAILABLE/DEPENDENCY_UNAVAILABLE (its limiter or
        journal store did not answer: nothing was asked) is sent again, with the same key,
        like a call to an unreachable peer: every DEPENDENCY_WAIT_S (or the error's
        RetryInfo) for up to `unavailable_s` seconds; `on_wait(error, waited seconds)` is
        called before each re-send (the run loop's `model_retry` diagnostic).

        Raises:
            MeshError: the gateway's error (RATE_LIMITED, PROVIDER_UNAVAILABLE, ...); UNAVAILABLE
                once a keyed call's re-sends are spent; UNAVAILABLE/DEPENDENCY_UNAVAILABLE once
                the gateway's stores stayed unavailable for `unavailable_s` seconds.
        """
        deltas = False
        attempt = 0
        waited_since: float | None = None
        while True:
            await self._ready("gateway")
            call = self.client.gateway_service.StreamGenerate(
                gpb.StreamGenerateRequest(request=request),
                metadata=_md(tenant),
                timeout=self._model_timeout_s,
            )
            resent = attempt > 0 or waited_since is not None
            try:
                async for message in call:
                    if message.WhichOneof("event") != "final":
                        if resent and deltas:
                            continue  # the repeat's deltas repeat what the caller has
                        deltas = True
                    yield message
                return
            except asyncio.CancelledError:
                if request.idempotency_key and (stops_call is None or stops_call()):
                    # Stopped on purpose (CancelRun, a tripwire): a keyed call would outlive us.
                    self._cancel_model_call(tenant, request.idempotency_key)
                raise
            except grpc.aio.AioRpcError as err:
                # An unkeyed call is never re-sent: a second call could bill and answer twice.
                # A keyed one whose gateway went away is: the gateway's journal answers it,
                # joins the call still running, or asks again once its dead holder's lease ends.
                failed = from_rpc_error(err)
                if request.idempotency_key and _dependency_wait(failed):
                    now = time.monotonic()
                    waited_since = now if waited_since is None else waited_since
                    if now - waited_since < self._unavailable_s:
                        if on_wait is not None:
                            on_wait(failed, now - waited_since)
                        await asyncio.sleep(min(failed.retry_after_seconds or DEPENDENCY_WAIT_S, 5.0))
                        continue
                    raise failed from err
                if not (request.idempotency_key and _transport_failure(err)) or attempt == MODEL_RESENDS:
                    raise failed from err
                attempt += 1
            finally:
                call.cancel()

    async def generate_final(
        self,
        tenant: str,
        request: gpb.ModelRequest,
        on_message: Callable[[gpb.StreamGenerateResponse], None],
        on_wait: Callable[[MeshError, float], None] | None = None,
        stops_call: Callable[[], bool] | None = None,
    ) -> gpb.StreamGenerateResponse | None:
        """Make one streamed model call as `generate` does; return its final message.

        The messages before the final (deltas) go to `on_message` in order. A keyed call of
        a run goes over the run's stream of calls when there is one (runs/peer_calls.py),
        with `generate`'s rules: re-sent when its stream broke or the gateway's stores did
        not answer, its repeat's deltas dropped when the caller already had some, stopped at
        the gateway (CancelGenerate) when `stops_call()` says the run itself ends it.

        Returns:
            The final message, or None when the stream ended without one.

        Raises:
            MeshError: as `generate`.
        """
        if request.idempotency_key and streams.run_calls(GATEWAY) is not None:
            answer = await self._generate_over_stream(tenant, request, on_message, on_wait, stops_call)
            if answer is not NOT_SENT:
                return answer  # type: ignore[return-value]
        final: gpb.StreamGenerateResponse | None = None
        async for message in self.generate(tenant, request, on_wait, stops_call):
            if message.WhichOneof("event") == "final":
                final = message
            else:
                on_message(message)
        return final

    async def _generate_over_stream(
        self,
        tenant: str,
        request: gpb.ModelRequest,
        on_message: Callable[[gpb.StreamGenerateResponse], None],
        on_wait: Callable[[MeshError, float], None] | None,
        stops_call: Callable[[], bool] | None,
    ) -> object:
        delivered = resent = False

        def on_event(message: gpb.StreamGenerateResponse) -> None:
            nonlocal delivered
            if resent and delivered:
                return  # the repeat's deltas repeat what the caller has
            delivered = True
            on_message(message)

        def on_resend() -> None:
            nonlocal resent
            resent = True
            self.unavailable_waits += 1

        waited_since: float | None = None
        while True:
            try:
                return await streams.send(
                    GATEWAY,
                    request,
                    timeout=self._model_timeout_s,
                    ready=self._ready,
                    on_event=on_event,
                    resends=MODEL_RESENDS,
                    on_resend=on_resend,
                )
            except asyncio.CancelledError:
                if stops_call is None or stops_call():
                    self._cancel_model_call(tenant, request.idempotency_key)  # it would outlive us
                raise
            except MeshError as failed:
                if not _dependency_wait(failed):
                    raise
                now = time.monotonic()
                waited_since = now if waited_since is None else waited_since
                if now - waited_since >= self._unavailable_s:
                    raise
                if on_wait is not None:
                    on_wait(failed, now - waited_since)
                resent = True
                await asyncio.sleep(min(failed.retry_after_seconds or DEPENDENCY_WAIT_S, 5.0))

    def _resent(self) -> None:
        self.unavailable_waits += 1

    def _cancel_model_call(self, tenant: str, key: str) -> None:
        """Ask the gateway, in the background, to stop the keyed call (CancelGenerate)."""

        async def send() -> None:
            try:
                await self.client.gateway_service.CancelGenerate(
                    gpb.CancelGenerateRequest(idempotency_key=key), metadata=_md(tenant), timeout=5.0
                )
            except grpc.aio.AioRpcError:
                pass  # best effort: the call then finishes and is journaled

        task = asyncio.get_running_loop().create_task(send())
        _CANCELS.add(task)
        task.add_done_callback(_CANCELS.discard)

    async def execute(self, tenant: str, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse:
        """Execute one tool call (idempotent on run_id + call_id at the tool service).

        Raises:
            MeshError: the tool service's error.
        """
        timeout = (
            request.timeout.seconds + request.timeout.nanos / 1e9 if request.HasField("timeout") else 600.0
        )
        deadline = timeout + self._tool_grace_s
        answer = await streams.send(
            TOOLS, (request, False), timeout=deadline, ready=self._ready, on_resend=self._resent
        )
        if answer is not NOT_SENT:
            return answer  # type: ignore[no-any-return]
        return await self._call(
            "tools",
            lambda: self.client.tool_service.ExecuteTool(request, metadata=_md(tenant), timeout=deadline),
        )

    async def stream_execute(
        self,
        tenant: str,
        request: tpb.ExecuteToolRequest,
        on_progress: Callable[[tpb.ToolProgress], None],
    ) -> tpb.ExecuteToolResponse:
        """Execute one tool call through StreamExecuteTool, passing its output chunks on.

        Re-sending is safe: the tool service answers a repeated (run_id, call_id) from its
        journal or joins the call in flight, so a stream cut by a restart is sent again, up
        to STREAM_RESENDS times (a chunk may then be passed on twice; the result is the
        call's one result).

        Args:
            tenant: the run's tenant.
            request: the call.
            on_progress: called with each output chunk, in order.

        Raises:
            MeshError: the tool service's error; INTERNAL when the stream ends without a result.
        """
        timeout = (
            request.timeout.seconds + request.timeout.nanos / 1e9 if request.HasField("timeout") else 600.0
        )

        async def send() -> tpb.ExecuteToolResponse:
            call = self.client.tool_service.StreamExecuteTool(
                tpb.StreamExecuteToolRequest(request=request),
                metadata=_md(tenant),
                timeout=timeout + self._tool_grace_s,
            )
            result: tpb.ExecuteToolResponse | None = None
            try:
                # Read to the stream's end (the result is its last message): leaving after the
                # result would cancel a call whose OK status is still on its way.
                async for message in call:
                    if message.HasField("progress") and result is None:
                        on_progress(message.progress)
                    elif message.HasField("result") and result is None:
                        result = message.result
            finally:
                call.cancel()
            if result is not None:
                return result
            raise MeshError(
                Status.INTERNAL, Reason.INTERNAL, "the tool service's stream ended without a result"
            )

        answer = await streams.send(
            TOOLS,
            (request, True),
            timeout=timeout + self._tool_grace_s,
            ready=self._ready,
            on_event=on_progress,
            resends=STREAM_RESENDS,
            on_resend=self._resent,
        )
        if answer is not NOT_SENT:
            return answer  # type: ignore[no-any-return]
        # gRPC's retry policy re-sends this stream only until its first message; one cut
        # later (a tools replica killed mid-command) is re-sent here, to any replica.
        for _ in range(STREAM_RESENDS):
            await self._ready("tools")
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                if not _transport_failure(err):
                    raise from_rpc_error(err) from err
                self.unavailable_waits += 1
        return await self._call("tools", send)


__all__ = ["MeshError", "Peers"]
