"""ModelGatewayService servicer: proto in, domain call, proto out (seed 002 "LLM Integration").

Thin by design: it reads the caller's deadline (`context.time_remaining()`) and tenant and
hands the request to `ModelGateway`; MeshErrors raised there become gRPC statuses with an
ErrorInfo reason (and RetryInfo for rate limits) in the mesh interceptor. When a client
cancels a call, grpc.aio cancels this handler: the provider's HTTP request (or stream) is
closed with it, unless the request carries an idempotency key: a keyed call goes through
the model-call journal (gateway/journal), outlives its caller, and is answered to its
repeat from the journal.

The tenant a call is charged to is `validation.resolve_tenant` of the body's `tenant` and the
caller's `x-agentrt-tenant` header; the request goes on with that tenant, so metrics and the
limiter's per-tenant buckets see only tenants that passed the header's rules.

Every Generate and StreamGenerate is recorded in `GatewayMetrics` (metrics.py) under the
resolved tenant and the resolved provider and model: the final response's usage and queue
wait, or the failure's reason, or the cancellation; each retry as it happens (through
`retry.retry_observer`, set for the call's task).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

import grpc
from sqlalchemy.exc import SQLAlchemyError

from agentrt.core.errors import MeshError, Reason, Status, missing
from agentrt.gateway.errors import ProviderError
from agentrt.gateway.gateway import KNOWN_PROVIDERS, ModelGateway
from agentrt.gateway.journal import CallJournal, MemoryJournalStore
from agentrt.gateway.metrics import CallLabels, GatewayMetrics
from agentrt.gateway.retry import retry_observer
from agentrt.gateway.validation import check_idempotency_key, resolve_tenant
from agentrt.mesh.calls import CallContext, CallsMethod, serve_calls
from agentrt.mesh.context import current_tenant
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc

log = logging.getLogger("agentrt.gateway")

#: How an unexpected exception is counted (the interceptor answers INTERNAL for it).
_INTERNAL = MeshError(Status.INTERNAL, Reason.INTERNAL, "internal error")


def _request(
    message: pb.GenerateRequest | pb.StreamGenerateRequest | pb.CountTokensRequest,
) -> pb.ModelRequest:
    """Return the message's ModelRequest with `tenant` set to the resolved tenant.

    Raises:
        MeshError: MISSING_FIELD (no request); INVALID_ID / INVALID_VALUE from `resolve_tenant`.
    """
    if not message.HasField("request"):
        raise missing("request")
    request = message.request
    request.tenant = resolve_tenant(request.tenant, current_tenant())
    return request


def _tenant_label(request: pb.ModelRequest) -> str:
    # A rejected body tenant is never a label: the call is counted for the caller's header.
    try:
        return resolve_tenant(request.tenant, current_tenant())
    except MeshError:
        return current_tenant()


class GatewayServicer(pb_grpc.ModelGatewayServiceServicer):
    """ModelGatewayService over a ModelGateway."""

    def __init__(
        self, gateway: ModelGateway, metrics: GatewayMetrics | None = None, journal: CallJournal | None = None
    ) -> None:
        """Serve gateway, recording calls in metrics (a private GatewayMetrics when None).

        Keyed Generate/StreamGenerate calls go through journal (an in-process one when None).
        """
        self._gateway = gateway
        self.metrics = metrics if metrics is not None else GatewayMetrics()
        self._journal = journal if journal is not None else CallJournal(gateway, MemoryJournalStore())

    def _labels(self, request: pb.ModelRequest | None) -> CallLabels:
        """Labels of a call's request (None: the message carried none)."""
        if request is None:
            return CallLabels(_tenant_label(pb.ModelRequest()), "unknown", "")
        tenant = _tenant_label(request)
        try:
            provider, model = self._gateway.resolve(request.model)
        except MeshError:
            # A provider this build does not know is one label, not one per caller typo.
            name = request.model.provider
            if name in KNOWN_PROVIDERS:
                return CallLabels(tenant, name, request.model.model)
            return CallLabels(tenant, "unknown", "")
        return CallLabels(tenant, provider.name, model)

    @contextlib.contextmanager
    def _observe_retries(self, labels: CallLabels) -> Iterator[None]:
        def seen(err: ProviderError) -> None:
            self.metrics.record_retry(labels, err)

        token = retry_observer.set(seen)
        try:
            yield
        finally:
            # A stream closed from another context (a finalizer) cannot reset the variable;
            # the call's task ends with it anyway.
            with contextlib.suppress(ValueError):
                retry_observer.reset(token)

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResponse:
        """Make one blocking model call.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD, UNKNOWN_PROVIDER, INVALID_JSON, INVALID_VALUE,
                UNKNOWN_TOOL, REQUEST_TOO_LARGE, UNSUPPORTED_CAPABILITY (bad request);
                INVALID_VALUE (an idempotency key over 256 characters or with a control
                character), IDEMPOTENCY_KEY_REUSED (the key named another request);
                INVALID_ID (malformed request.tenant), INVALID_VALUE (request.tenant differs
                from a non-default x-agentrt-tenant header);
                CONTEXT_OVERFLOW or INVALID_REQUEST (the provider refused it).
            FAILED_PRECONDITION: PROVIDER_NOT_CONFIGURED.
            RESOURCE_EXHAUSTED: RATE_LIMITED, with RetryInfo.
            UNAVAILABLE: PROVIDER_UNAVAILABLE (5xx, overloaded, unreachable) after retries;
                DEPENDENCY_UNAVAILABLE (a keyed call whose journal store failed; nothing asked).
            UNAUTHENTICATED: PROVIDER_AUTHENTICATION.
        """
        labels = self._labels(request.request if request.HasField("request") else None)
        try:
            with self._observe_retries(labels):
                answer = await self._journal.generate(_request(request), context.time_remaining())
        except MeshError as err:
            self.metrics.record_failure(labels, "Generate", err)
            raise
        except asyncio.CancelledError:
            self.metrics.record_canceled(labels, "Generate")
            raise
        except Exception:
            self.metrics.record_failure(labels, "Generate", _INTERNAL)
            raise
        self.metrics.record_answer(labels, "Generate", answer)
        return answer

    async def StreamGenerate(
        self, request: pb.StreamGenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamGenerateResponse]:
        """Stream deltas, then exactly one `final`.

        Raises:
            The statuses of Generate; UNAVAILABLE/PROVIDER_UNAVAILABLE when the provider's
            stream ends early or is malformed (no final is sent then).
        """
        async for item in self._stream(request.request if request.HasField("request") else None, context):
            yield item

    async def _stream(
        self, request: pb.ModelRequest | None, context: grpc.aio.ServicerContext | CallContext
    ) -> AsyncIterator[pb.StreamGenerateResponse]:
        """StreamGenerate of a request (None: the message carried none), as StreamGenerate says."""
        labels = self._labels(request)
        recorded = False
        try:
            with self._observe_retries(labels):
                if request is None:
                    raise missing("request")
                request.tenant = resolve_tenant(request.tenant, current_tenant())
                stream = self._journal.stream(request, context.time_remaining())
                try:
                    async for item in stream:
                        if item.WhichOneof("event") == "final":
                            recorded = True
                            self.metrics.record_answer(labels, "StreamGenerate", item.final)
                        yield item
                finally:
                    await stream.aclose()  # type: ignore[attr-defined]
        except MeshError as err:
            recorded = True
            self.metrics.record_failure(labels, "StreamGenerate", err)
            raise
        except Exception:
            recorded = True
            self.metrics.record_failure(labels, "StreamGenerate", _INTERNAL)
            raise
        finally:
            # Neither answered nor failed: the client went away (cancel, deadline).
            if not recorded:
                self.metrics.record_canceled(labels, "StreamGenerate")

    async def StreamGenerateCalls(
        self, requests: AsyncIterator[pb.StreamGenerateCallsRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamGenerateCallsResponse]:
        """Serve StreamGenerate calls over one stream (mesh/calls.py; the run loop keeps one per run).

        Each call streams exactly what StreamGenerate streams (deltas, then one final), or
        its error as CallError.
        """
        async for response in serve_calls(requests, context, self.generate_calls()):
            yield response

    def generate_calls(self) -> CallsMethod:
        """StreamGenerate as a stream of calls' method (mesh/calls.py; mesh/local_calls.py in one process)."""

        async def handle(call: pb.StreamGenerateCallsRequest, ctx: CallContext) -> AsyncIterator[object]:
            # The call's own request, not a StreamGenerateRequest built around a copy of it.
            async for message in self._stream(call.request if call.HasField("request") else None, ctx):
                yield message

        return CallsMethod(
            "agentrt.v1.ModelGatewayService",
            "StreamGenerate",
            handle,
            lambda call_id, event: pb.StreamGenerateCallsResponse(call_id=call_id, event=event),
            lambda call_id, error: pb.StreamGenerateCallsResponse(call_id=call_id, error=error),
        )

    async def CountTokens(
        self, request: pb.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.CountTokensResponse:
        """Count a request's input tokens.

        Raises:
            FAILED_PRECONDITION: TOKEN_COUNTING_UNSUPPORTED (Chat Completions), PROVIDER_NOT_CONFIGURED.
            The other statuses of Generate.
        """
        return await self._gateway.count_tokens(_request(request), context.time_remaining())

    async def CancelGenerate(
        self, request: pb.CancelGenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelGenerateResponse:
        """Stop a keyed call, here or through its journal row on its holder (see CallJournal.cancel).

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD (no idempotency_key), INVALID_VALUE (a key over 256
                characters or with a control character).
            UNAVAILABLE: DEPENDENCY_UNAVAILABLE (the journal's store failed to mark the row).
        """
        if not request.idempotency_key:
            raise missing("idempotency_key")
        check_idempotency_key(request.idempotency_key)
        tenant = resolve_tenant("", current_tenant())
        try:
            canceled = await self._journal.cancel(tenant, request.idempotency_key)
        except (SQLAlchemyError, OSError) as exc:
            # The driver's text (statements, parameters) stays in the log, not in the answer.
            log.warning("CancelGenerate: the journal could not mark the call: %s", exc)
            raise MeshError(
                Status.UNAVAILABLE,
                Reason.DEPENDENCY_UNAVAILABLE,
                "the gateway's model-call journal is unavailable; the call was not cancelled "
                f"({type(exc).__name__}); retry",
                retry_after_seconds=1.0,
            ) from exc
        return pb.CancelGenerateResponse(canceled=canceled)

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        """List the configured providers and their default models."""
        return self._gateway.list_models()
