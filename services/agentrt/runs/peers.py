"""The run loop's door to its peers: gateway, tool service, session store (over gRPC).

The only module of the run loop that touches grpc. Every call goes over the long-lived
channels of one `MeshClient`, carries the run's tenant in metadata, and a failed call is
re-raised as the peer's `MeshError` (status and reason preserved), so the loop and the
servicer pass a peer's NOT_FOUND/SESSION_NOT_FOUND on unchanged.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import grpc

from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.status import from_rpc_error
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import tool_service_pb2 as tpb

SESSION_CALL_TIMEOUT_S = 30.0
CATALOG_TTL_S = 30.0


def _md(tenant: str) -> list[tuple[str, str]]:
    return [(TENANT_HEADER, tenant)]


class Peers:
    """Typed calls to the gateway, tools and sessions (see the module docstring)."""

    def __init__(self, client: MeshClient, tool_grace_s: float = 30.0) -> None:
        """Wrap a MeshClient whose gateway, tools and sessions addresses are set."""
        self.client = client
        self._tool_grace_s = tool_grace_s
        self._catalog: dict[str, cpb.ToolSpec] = {}
        self._catalog_time = 0.0

    async def close(self) -> None:
        """Close the channels."""
        await self.client.close()

    async def catalog(self, tenant: str) -> dict[str, cpb.ToolSpec]:
        """Return the tool catalog by name (cached for CATALOG_TTL_S seconds).

        Raises:
            MeshError: the tool service's error (UNAVAILABLE when it is down).
        """
        if self._catalog and time.monotonic() - self._catalog_time < CATALOG_TTL_S:
            return self._catalog
        try:
            resp = await self.client.tool_service.ListTools(
                tpb.ListToolsRequest(), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        self._catalog = {t.name: t for t in resp.tools}
        self._catalog_time = time.monotonic()
        return self._catalog

    async def create_session(self, tenant: str, title: str = "") -> str:
        """Create a session; return its id."""
        try:
            resp = await self.client.session_service.CreateSession(
                spb.CreateSessionRequest(title=title), metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        return resp.session.session_id

    async def get_session(self, tenant: str, session_id: str) -> spb.Session:
        """Return the session. Raises the session service's NOT_FOUND/SESSION_NOT_FOUND."""
        try:
            resp = await self.client.session_service.GetSession(
                spb.GetSessionRequest(session=spb.SessionRef(session_id=session_id)),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        return resp.session

    async def context(self, tenant: str, session_id: str) -> tuple[list[spb.Entry], int, str]:
        """Return (the session's context entries in order, its last seq, the active leaf id)."""
        try:
            resp = await self.client.session_service.GetContext(
                spb.GetContextRequest(session=spb.SessionRef(session_id=session_id)),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        return list(resp.entries), resp.last_seq, resp.leaf_entry_id

    async def tail(self, tenant: str, session_id: str, after_seq: int) -> tuple[list[spb.Entry], int]:
        """Return (the raw log entries after a seq, in seq order; the highest seq stored)."""
        try:
            resp = await self.client.session_service.ListEntries(
                spb.ListEntriesRequest(session=spb.SessionRef(session_id=session_id), after_seq=after_seq),
                metadata=_md(tenant),
                timeout=SESSION_CALL_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
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
        req = spb.AppendEntriesRequest(session=spb.SessionRef(session_id=session_id), entries=entries)
        if expected_last_seq is not None:
            req.expected_last_seq = expected_last_seq
        try:
            resp = await self.client.session_service.AppendEntries(
                req, metadata=_md(tenant), timeout=SESSION_CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        return list(resp.entries)

    async def generate(
        self, tenant: str, request: gpb.ModelRequest
    ) -> AsyncIterator[gpb.StreamGenerateResponse]:
        """Stream one model call; yields deltas then the final response.

        Raises:
            MeshError: the gateway's error (RATE_LIMITED, PROVIDER_UNAVAILABLE, ...).
        """
        call = self.client.gateway_service.StreamGenerate(
            gpb.StreamGenerateRequest(request=request), metadata=_md(tenant)
        )
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        finally:
            call.cancel()

    async def execute(self, tenant: str, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse:
        """Execute one tool call (idempotent on run_id + call_id at the tool service).

        Raises:
            MeshError: the tool service's error.
        """
        timeout = (
            request.timeout.seconds + request.timeout.nanos / 1e9 if request.HasField("timeout") else 600.0
        )
        try:
            return await self.client.tool_service.ExecuteTool(
                request, metadata=_md(tenant), timeout=timeout + self._tool_grace_s
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err


__all__ = ["MeshError", "Peers"]
