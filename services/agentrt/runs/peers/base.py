"""What every call of the run loop to a peer shares: the channels, the tenant, reaching a peer.

Every call goes over the long-lived channels of one `MeshClient`, carries the run's tenant in
metadata, and a failed call is re-raised as the peer's `MeshError` (status and reason
preserved), so the loop and the servicer pass a peer's NOT_FOUND/SESSION_NOT_FOUND on unchanged.
Every such error names the peer it came from (`MeshError.peer`, set by `answered_by`), so a
run's failure says which service refused (runs/loop/failures.py `failure_of`).

Reaching a peer is gRPC's job (decision 0004, issue 13): the channels are `MeshClient`'s
with `wait_for_ready` and the fenced retry policy (`client.channels.FENCED_METHODS`). A peer
that is not up yet (a restart brings the services up in any order, and a takeover can
resume a run ~ms before its tool service serves) is waited for by the channel's own
connectivity (`channel_ready()`) for up to `unavailable_s` seconds, then the call fails
UNAVAILABLE/DEPENDENCY_UNAVAILABLE. Each call is then sent once with its deadline; gRPC's
retry policy re-sends, on another replica, what is safe to send twice (reads, ExecuteTool
journaled by run_id + call_id, the run loop's fenced AppendEntries) when a replica fails it
with UNAVAILABLE, and its transparent retry re-sends any call that never left the client.
The calls themselves are in sessions.py, tools.py and gateway.py; `client.Peers` has them all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import grpc

from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.local_calls import LocalCalls
from agentrt.mesh.status import from_rpc_error, reason_of
from agentrt.v1 import common_pb2 as cpb

SESSION_CALL_TIMEOUT_S = 30.0
#: Deadline of one model call, seconds: above the gateway's own provider-call cap
#: (AGENTRT_GATEWAY_TIMEOUT_SECONDS, 600) so the gateway's answer, not ours, ends a slow call.
MODEL_CALL_TIMEOUT_S = 660.0

T = TypeVar("T")


def transport_failure(err: grpc.aio.AioRpcError) -> bool:
    """True when the call failed below any server (UNAVAILABLE with no ErrorInfo reason)."""
    return err.code() == grpc.StatusCode.UNAVAILABLE and not reason_of(err)


@contextlib.contextmanager
def answered_by(peer: str) -> Iterator[None]:
    """Name `peer` ("sessions", "tools", "gateway") on a `MeshError` raised in the block.

    An error that already names a peer keeps it; the error is re-raised unchanged otherwise.
    """
    try:
        yield
    except MeshError as err:
        err.peer = err.peer or peer
        raise


def meta(tenant: str) -> list[tuple[str, str]]:
    """Return the call metadata naming the run's tenant."""
    return [(TENANT_HEADER, tenant)]


class PeerBase:
    """The channels and the waits every peer call shares (see the module docstring)."""

    def __init__(
        self,
        client: MeshClient,
        tool_grace_s: float = 30.0,
        unavailable_s: float = 30.0,
        model_timeout_s: float = MODEL_CALL_TIMEOUT_S,
        local: LocalCalls | None = None,
    ) -> None:
        """Wrap a MeshClient whose gateway, tools and sessions addresses are set.

        Args:
            client: the long-lived channels (open them with wait_for_ready=True and
                fenced=True: see the module docstring).
            tool_grace_s: added to a tool's own timeout for the ExecuteTool deadline, seconds.
            unavailable_s: how long a call waits for an unreachable peer, seconds (0 = no wait).
            model_timeout_s: deadline of one model call, seconds.
            local: the peers served by this same process (mesh/local_calls.py): a run's
                streams of calls to them cross no wire. None = every peer over gRPC.
        """
        self.client = client
        self.local = local
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
            MeshError: UNAVAILABLE/DEPENDENCY_UNAVAILABLE (naming `peer`) when none became
                READY in time.
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
                peer=peer,
            ) from None

    async def _call(self, peer: str, send: Callable[[], Awaitable[T]]) -> T:
        """Send a unary call once, when the peer is reachable (see the module docstring).

        Raises:
            MeshError: the peer's error; UNAVAILABLE/DEPENDENCY_UNAVAILABLE when the peer
                stayed unreachable for `unavailable_s` seconds, or failed the call at the
                transport and gRPC's policy could not (or must not) re-send it.
        """
        with answered_by(peer):
            await self._ready(peer)
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                raise from_rpc_error(err) from err

    def _resent(self) -> None:
        self.unavailable_waits += 1
