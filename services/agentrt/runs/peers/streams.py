"""A run's streams of calls to its peers: the turn's calls without a new RPC each (decision 0023).

Every tool turn makes the same three calls: StreamGenerate (gateway), ExecuteTool (tools),
AppendEntries (sessions). Each as its own RPC costs a new call on both sides; a run's
executor therefore keeps one stream of calls per peer (`agentrt.client.calls.CallStream`
over `StreamGenerateCalls`, `ExecuteToolCalls`, `AppendEntriesCalls`; the servers' half is
`agentrt.mesh.calls`) for as long as it drives the run, opened at the first call on the
channel's balancing, so a run's calls stay on one replica of each peer while the runs of a
replica spread over all of them.

`RunCalls` is set for the executor's task (`RUN_CALLS`, inherited by the tasks it starts),
and `Peers` sends these three calls through it when set. What each call answers is what its
RPC answers; what changes is only what happens when the stream breaks under a call
(`StreamBroken`: the peer's replica went away or stopped): every call sent this way is
safe to send twice, and is sent again on a new stream, to any replica:
- AppendEntries: the run loop's batches are fenced by expected_last_seq (a second copy is
  refused SEQ_MISMATCH and the batch recognised, runs/loop/persistence.py);
- ExecuteTool: journaled by (run_id, call_id, attempt): the repeat is answered from the
  journal or attaches to the call still running;
- StreamGenerate: only keyed calls go this way; the gateway's model-call journal answers
  the repeat (decision 0019), and its deltas are dropped when the caller already had some.
A peer that does not serve the streams (an older version: UNIMPLEMENTED) is called with
the plain RPCs from then on.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from agentrt.client.calls import ERROR, EVENT, FINAL, CallStream, CallsUnsupported, StreamBroken
from agentrt.client.channels import MeshClient
from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import TENANT_HEADER
from agentrt.mesh.local_calls import LocalCalls
from agentrt.mesh.telemetry.rpc_client import client_call
from agentrt.runs.peers.base import answered_by
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import session_service_pb2 as spb
from agentrt.v1 import tool_service_pb2 as tpb

#: The RunCalls of the run whose executor's task this is (None: the plain RPCs).
RUN_CALLS: contextvars.ContextVar[RunCalls | None] = contextvars.ContextVar("agentrt_run_calls", default=None)

#: Peers whose streams of calls RunCalls carries.
SESSIONS, TOOLS, GATEWAY = "sessions", "tools", "gateway"


def _append_request(header: cpb.CallHeader, payload: Any) -> spb.AppendEntriesCallsRequest:
    return spb.AppendEntriesCallsRequest(header=header, request=payload)


def _append_split(answer: spb.AppendEntriesCallsResponse) -> tuple[int, str, Any]:
    if answer.HasField("error"):
        return answer.call_id, ERROR, answer.error
    return answer.call_id, FINAL, answer.response


def _execute_request(header: cpb.CallHeader, payload: Any) -> tpb.ExecuteToolCallsRequest:
    if payload is None:
        return tpb.ExecuteToolCallsRequest(header=header)
    request, progress = payload
    return tpb.ExecuteToolCallsRequest(header=header, request=request, progress=progress)


def _execute_split(answer: tpb.ExecuteToolCallsResponse) -> tuple[int, str, Any]:
    kind = answer.WhichOneof("event")
    if kind == "progress":
        return answer.call_id, EVENT, answer.progress
    if kind == "error":
        return answer.call_id, ERROR, answer.error
    return answer.call_id, FINAL, answer.result


def _generate_request(header: cpb.CallHeader, payload: Any) -> gpb.StreamGenerateCallsRequest:
    return gpb.StreamGenerateCallsRequest(header=header, request=payload)


def _generate_split(answer: gpb.StreamGenerateCallsResponse) -> tuple[int, str, Any]:
    if answer.HasField("error"):
        return answer.call_id, ERROR, answer.error
    return answer.call_id, FINAL if answer.event.WhichOneof("event") == "final" else EVENT, answer.event


class RunCalls:
    """One run's streams of calls to its peers (see the module docstring)."""

    def __init__(self, client: MeshClient, tenant: str, local: LocalCalls | None = None) -> None:
        """Prepare the streams of one run of `tenant` (none opens before its first call).

        A peer that `local` hosts (served by this same process) is called over a
        `LocalStream` (mesh/local_calls.py), every other over gRPC.
        """
        metadata = [(TENANT_HEADER, tenant)]
        #: Peers called in this process, without the wire.
        self.local: frozenset[str] = frozenset(
            p for p in (SESSIONS, TOOLS, GATEWAY) if local is not None and local.hosts(p)
        )

        def opener(peer: str, method: Callable[..., Any]) -> Callable[[], Any]:
            if peer in self.local:
                assert local is not None
                return local.opener(peer, tenant)
            return lambda: method(metadata=metadata)

        self.streams: dict[str, CallStream] = {
            SESSIONS: CallStream(
                opener(SESSIONS, client.session_service.AppendEntriesCalls), _append_request, _append_split
            ),
            TOOLS: CallStream(
                opener(TOOLS, client.tool_service.ExecuteToolCalls), _execute_request, _execute_split
            ),
            GATEWAY: CallStream(
                opener(GATEWAY, client.gateway_service.StreamGenerateCalls),
                _generate_request,
                _generate_split,
            ),
        }
        #: Peers that answered UNIMPLEMENTED: called with the plain RPCs from then on.
        self.unsupported: set[str] = set()

    def stream(self, peer: str) -> CallStream | None:
        """The peer's stream of calls, None when the peer does not serve it."""
        return None if peer in self.unsupported else self.streams[peer]

    def close(self) -> None:
        """Close the streams once their calls have answered."""
        for stream in self.streams.values():
            stream.close()


def run_calls(peer: str) -> tuple[RunCalls, CallStream] | None:
    """The current run's stream of calls to `peer`, None when there is none to use."""
    calls = RUN_CALLS.get()
    if calls is None:
        return None
    stream = calls.stream(peer)
    return None if stream is None else (calls, stream)


#: Service and method names of each peer's calls (the CLIENT spans of client_call).
_METHODS = {
    SESSIONS: ("agentrt.v1.SessionService", "AppendEntries"),
    TOOLS: ("agentrt.v1.ToolService", "ExecuteTool"),
    GATEWAY: ("agentrt.v1.ModelGatewayService", "StreamGenerate"),
}
#: Pauses before re-sending a call whose stream broke, seconds (as gRPC's retry policy backs off).
RESEND_PAUSES_S = (0.05, 0.1, 0.2, 0.4)


async def send(
    peer: str,
    payload: Any,
    *,
    timeout: float | None,
    ready: Callable[[str], Awaitable[None]],
    on_event: Callable[[Any], None] | None = None,
    resends: int = len(RESEND_PAUSES_S),
    on_resend: Callable[[], None] | None = None,
) -> Any:
    """Send one call over the current run's stream to `peer`; return its answer.

    A call whose stream broke is sent again on a new stream up to `resends` times (every
    call sent this way is safe twice: see the module docstring), after `ready(peer)` says
    a replica is reachable again; `on_resend()` is called before each re-send.

    Returns:
        The call's answer, or `NOT_SENT` when there is no stream to use (no run's streams
        in this task, or the peer does not serve them): the caller makes the plain RPC.

    Raises:
        MeshError: the call's failure (as its RPC's); UNAVAILABLE/DEPENDENCY_UNAVAILABLE
            when its stream kept breaking. Either names `peer` (`MeshError.peer`).
    """
    with answered_by(peer):
        return await _send(peer, payload, timeout, ready, on_event, resends, on_resend)


async def _send(
    peer: str,
    payload: Any,
    timeout: float | None,
    ready: Callable[[str], Awaitable[None]],
    on_event: Callable[[Any], None] | None,
    resends: int,
    on_resend: Callable[[], None] | None,
) -> Any:
    via = run_calls(peer)
    if via is None:
        return NOT_SENT
    calls, stream = via
    service, method = _METHODS[peer]
    for attempt in range(resends + 1):
        if peer not in calls.local:  # a peer in this process is ready while it serves
            await ready(peer)
        try:
            with client_call(service, method) as traceparent:
                return await stream.call(payload, timeout=timeout, on_event=on_event, traceparent=traceparent)
        except CallsUnsupported:
            calls.unsupported.add(peer)
            return NOT_SENT
        except StreamBroken as broken:
            if attempt == resends:
                raise MeshError(
                    Status.UNAVAILABLE,
                    Reason.DEPENDENCY_UNAVAILABLE,
                    f"the {peer} service kept dropping the call ({broken})",
                ) from None
            if on_resend is not None:
                on_resend()
            await asyncio.sleep(RESEND_PAUSES_S[min(attempt, len(RESEND_PAUSES_S) - 1)])
    raise AssertionError("unreachable")  # pragma: no cover


#: `send`'s answer when the call was not sent (use the plain RPC).
NOT_SENT: Any = object()
