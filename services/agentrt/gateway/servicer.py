"""ModelGatewayService servicer: proto in, domain call, proto out (seed 002 "LLM Integration").

Thin by design: it reads the caller's deadline (`context.time_remaining()`) and tenant and
hands the request to `ModelGateway`; MeshErrors raised there become gRPC statuses with an
ErrorInfo reason (and RetryInfo for rate limits) in the mesh interceptor. When a client
cancels StreamGenerate, grpc.aio cancels this handler and closing the domain stream closes
the provider's HTTP stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from agentrt.core.errors import missing
from agentrt.gateway.gateway import ModelGateway
from agentrt.mesh.context import current_tenant
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc


def _request(
    message: pb.GenerateRequest | pb.StreamGenerateRequest | pb.CountTokensRequest,
) -> pb.ModelRequest:
    if not message.HasField("request"):
        raise missing("request")
    request = message.request
    if not request.tenant:
        request.tenant = current_tenant()
    return request


class GatewayServicer(pb_grpc.ModelGatewayServiceServicer):
    """ModelGatewayService over a ModelGateway."""

    def __init__(self, gateway: ModelGateway) -> None:
        """Serve gateway."""
        self._gateway = gateway

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResponse:
        """Make one blocking model call.

        Raises:
            INVALID_ARGUMENT: MISSING_FIELD, UNKNOWN_PROVIDER, INVALID_JSON, INVALID_VALUE,
                UNKNOWN_TOOL, REQUEST_TOO_LARGE, UNSUPPORTED_CAPABILITY (bad request);
                CONTEXT_OVERFLOW or INVALID_REQUEST (the provider refused it).
            FAILED_PRECONDITION: PROVIDER_NOT_CONFIGURED.
            RESOURCE_EXHAUSTED: RATE_LIMITED, with RetryInfo.
            UNAVAILABLE: PROVIDER_UNAVAILABLE (5xx, overloaded, unreachable) after retries.
            UNAUTHENTICATED: PROVIDER_AUTHENTICATION.
        """
        return await self._gateway.generate(_request(request), context.time_remaining())

    async def StreamGenerate(
        self, request: pb.StreamGenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamGenerateResponse]:
        """Stream deltas, then exactly one `final`.

        Raises:
            The statuses of Generate; UNAVAILABLE/PROVIDER_UNAVAILABLE when the provider's
            stream ends early or is malformed (no final is sent then).
        """
        stream = self._gateway.stream(_request(request), context.time_remaining())
        try:
            async for item in stream:
                yield item
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def CountTokens(
        self, request: pb.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.CountTokensResponse:
        """Count a request's input tokens.

        Raises:
            FAILED_PRECONDITION: TOKEN_COUNTING_UNSUPPORTED (Chat Completions), PROVIDER_NOT_CONFIGURED.
            The other statuses of Generate.
        """
        return await self._gateway.count_tokens(_request(request), context.time_remaining())

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        """List the configured providers and their default models."""
        return self._gateway.list_models()
