"""The run loop's model calls to the gateway (ModelGatewayService).

A model call (Generate, StreamGenerate) goes once, with a deadline: an unkeyed one is never
re-sent, since a provider would answer and bill twice. A keyed one (the run loop's turns:
runs/loop/phases/model.py `model_call_key`) is re-sent up to MODEL_RESENDS times when its gateway
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
from collections.abc import AsyncIterator, Callable

import grpc

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.status import from_rpc_error
from agentrt.runs.peers import streams
from agentrt.runs.peers.base import SESSION_CALL_TIMEOUT_S, PeerBase, meta, transport_failure
from agentrt.runs.peers.streams import GATEWAY, NOT_SENT
from agentrt.v1 import gateway_service_pb2 as gpb

#: Re-sends of a keyed StreamGenerate whose gateway replica went away (killed, restarted).
MODEL_RESENDS = 3
#: Pause before re-sending a keyed model call the gateway refused DEPENDENCY_UNAVAILABLE
#: without RetryInfo, seconds.
DEPENDENCY_WAIT_S = 1.0

#: CancelGenerate calls in flight (kept referenced until done).
_CANCELS: set[asyncio.Task[None]] = set()


def _dependency_wait(err: MeshError) -> bool:
    """True for a gateway refusal that asked nothing and is worth waiting out (its stores)."""
    return err.status == Status.UNAVAILABLE and err.reason == Reason.DEPENDENCY_UNAVAILABLE


class ModelCalls(PeerBase):
    """Typed model calls to the gateway."""

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
                    gpb.GenerateRequest(request=request),
                    metadata=meta(tenant),
                    timeout=self._model_timeout_s,
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
                gpb.CountTokensRequest(request=request),
                metadata=meta(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            ),
        )
        return int(resp.input_tokens)

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
                metadata=meta(tenant),
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
                failed.peer = GATEWAY
                if request.idempotency_key and _dependency_wait(failed):
                    now = time.monotonic()
                    waited_since = now if waited_since is None else waited_since
                    if now - waited_since < self._unavailable_s:
                        if on_wait is not None:
                            on_wait(failed, now - waited_since)
                        await asyncio.sleep(min(failed.retry_after_seconds or DEPENDENCY_WAIT_S, 5.0))
                        continue
                    raise failed from err
                if not (request.idempotency_key and transport_failure(err)) or attempt == MODEL_RESENDS:
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
        a run goes over the run's stream of calls when there is one (runs/peers/streams.py),
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

    def _cancel_model_call(self, tenant: str, key: str) -> None:
        """Ask the gateway, in the background, to stop the keyed call (CancelGenerate)."""

        async def send() -> None:
            try:
                await self.client.gateway_service.CancelGenerate(
                    gpb.CancelGenerateRequest(idempotency_key=key), metadata=meta(tenant), timeout=5.0
                )
            except grpc.aio.AioRpcError:
                pass  # best effort: the call then finishes and is journaled

        task = asyncio.get_running_loop().create_task(send())
        _CANCELS.add(task)
        task.add_done_callback(_CANCELS.discard)
