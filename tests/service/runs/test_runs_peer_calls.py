"""How the run loop reaches its peers (runs/peers/): a model call goes once, with a deadline,
and is never re-sent by the channel's retry policy; a fenced write that a replica fails with
UNAVAILABLE is re-sent by gRPC's policy; a peer that is not up is waited for, boundedly.

The peer is a real grpc.aio server (the production stubs' service) that answers UNAVAILABLE,
the way a replica that is going away does, and counts what it received."""

from __future__ import annotations

import grpc
import pytest

from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.runs.peers.client import MODEL_CALL_TIMEOUT_S, Peers
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import gateway_service_pb2_grpc as gpb_grpc
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from tests.ports import free_ports


class Going(gpb_grpc.ModelGatewayServiceServicer, spb_grpc.SessionServiceServicer):
    """Every call: counted, its deadline noted, then UNAVAILABLE (a replica going away)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.remaining: list[float | None] = []

    async def _refuse(self, name: str, context: grpc.aio.ServicerContext) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.remaining.append(context.time_remaining())
        await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")

    async def StreamGenerate(self, request, context):  # noqa: N802 - generated name
        await self._refuse("StreamGenerate", context)
        yield gpb.StreamGenerateResponse()

    async def AppendEntries(self, request, context):  # noqa: N802 - generated name
        await self._refuse("AppendEntries", context)


@pytest.fixture
async def going():
    servicer = Going()
    server = grpc.aio.server()
    gpb_grpc.add_ModelGatewayServiceServicer_to_server(servicer, server)
    spb_grpc.add_SessionServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(0)


def _peers(address: str, unavailable_s: float = 5.0) -> Peers:
    client = MeshClient(gateway=address, sessions=address, tools=address, wait_for_ready=True, fenced=True)
    return Peers(client, unavailable_s=unavailable_s)


async def test_a_model_call_goes_once_with_a_deadline(going):
    servicer, address = going
    peers = _peers(address)
    try:
        with pytest.raises(MeshError) as caught:
            async for _ in peers.generate("t", gpb.ModelRequest()):
                pass
        assert caught.value.status == Status.UNAVAILABLE
        assert servicer.calls == {"StreamGenerate": 1}  # not re-sent, by the policy or by us
        (remaining,) = servicer.remaining
        # the deadline the call carries (the server reads it against its own clock: a little slack)
        assert remaining is not None and MODEL_CALL_TIMEOUT_S - 60 < remaining <= MODEL_CALL_TIMEOUT_S + 5
    finally:
        await peers.close()


async def test_a_fenced_append_is_re_sent_by_the_retry_policy(going):
    servicer, address = going
    peers = _peers(address)
    try:
        with pytest.raises(MeshError):
            await peers.append("t", "ses_x", [spb.Entry()], expected_last_seq=3)
        assert servicer.calls["AppendEntries"] == 5  # the policy's maxAttempts
    finally:
        await peers.close()


async def test_a_peer_that_is_not_up_is_waited_for_then_unavailable():
    (port,) = free_ports(1)
    peers = _peers(f"127.0.0.1:{port}", unavailable_s=0.3)
    try:
        with pytest.raises(MeshError) as caught:
            await peers.get_session("t", "ses_x")
        assert (caught.value.status, caught.value.reason) == (
            Status.UNAVAILABLE,
            Reason.DEPENDENCY_UNAVAILABLE,
        )
        assert peers.unavailable_waits == 1
    finally:
        await peers.close()
