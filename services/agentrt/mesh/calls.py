"""Streams of calls: many calls of one method over one long-lived bidi stream (the server side).

A unary call through grpc.aio costs a new call on both sides (about 1.1 ms of CPU here,
client and server together), a message on a stream that is already open about half of that
(docs/decisions/0023-hot-path-redesign.md). The run loop makes the same few calls every turn
(AppendEntries, ExecuteTool, StreamGenerate), so each of those services also serves them as a
stream of calls (`AppendEntriesCalls`, `ExecuteToolCalls`, `StreamGenerateCalls`): the caller
keeps one stream per run and sends each call as a request that opens with a `CallHeader`.

`serve_calls` is the server's half, the same for every such RPC:
- each request is one call: its handler runs in a task of its own (several calls may be in
  flight at once; each answer names its call), with the stream's tenant (set by the
  MeshInterceptor for the stream) and a deadline from `header.timeout` (a call past it is
  cancelled, as an RPC past its deadline is, and answered DEADLINE_EXCEEDED);
- a call's messages are what its unary or server-streaming RPC would send, then nothing; a
  failure is one `CallError` message built from the MeshError the handler raised (a
  transient database failure: UNAVAILABLE; anything else: INTERNAL, logged), exactly the
  status and ErrorInfo the RPC would have ended with;
- a request with `header.cancel` cancels that call's handler (as a cancelled RPC: no
  further message); an id of 0 is refused INVALID_ARGUMENT (a CallError tagged 0); an id
  already in flight ends the whole stream INVALID_ARGUMENT/INVALID_ID (a refusal tagged with
  it would be a second final message of the live call; every call in flight is cancelled);
- the stream ends OK once the caller half-closed and every call has answered; when the
  stream itself ends (the caller went away, the server's drain ran out) every call in
  flight is cancelled, as each RPC would have been;
- when the server begins its drain (`agentrt.mesh.context.server_stopping`), the stream
  reads no further call and ends OK as soon as the calls it took have answered: a call
  is either answered in full or never begins here, so the caller (who sees the stream end
  below a call it sent: `StreamBroken`) may send it again to another replica. Without
  this, a stream left open by its caller would run calls to the end of the drain and
  have the last ones cancelled mid-way (a tool call whose outcome nobody knows);
- each call is counted and traced like an RPC of its own method (`mesh.telemetry.rpc`:
  `inner_call`), its span a child of `header.traceparent`.

Invariant: a call over the stream answers exactly what the same call as its own RPC answers;
only the transport changed. The client's half is `agentrt.client.calls`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.context import server_stopping
from agentrt.mesh.status import call_error
from agentrt.mesh.storage.transient import database_unavailable
from agentrt.mesh.telemetry.rpc import InnerOutcome, inner_call
from agentrt.v1 import common_pb2 as cpb

log = logging.getLogger("agentrt.mesh")

#: A call's handler: (inner request, its context) -> its messages, the last one final.
Handler = Callable[[Any, "CallContext"], AsyncIterator[Any]]


class CallContext:
    """What a handler may read of its call (the part of grpc.aio.ServicerContext they use).

    `time_remaining()` is the call's own deadline, not the stream's; anything else is the
    stream's (its peer, its metadata).
    """

    def __init__(self, stream: grpc.aio.ServicerContext, deadline: float | None) -> None:
        """Wrap the stream's context with the call's deadline (event loop time, None = none)."""
        self._stream = stream
        self.deadline = deadline

    def time_remaining(self) -> float | None:
        """Seconds until the call's deadline, None when it has none."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    def peer(self) -> str:
        """The stream's peer."""
        return str(self._stream.peer())

    def invocation_metadata(self) -> Any:
        """The stream's metadata."""
        return self._stream.invocation_metadata()


@dataclass(frozen=True)
class CallsMethod:
    """How one stream-of-calls RPC wraps its method (see the module docstring).

    Attributes:
        service: the full service name, e.g. "agentrt.v1.SessionService" (metrics, spans).
        method: the method each call is, e.g. "AppendEntries".
        handle: runs one call.
        answer: (call_id, one message of the call) -> the response envelope.
        fail: (call_id, the call's CallError) -> the response envelope.
    """

    service: str
    method: str
    handle: Handler
    answer: Callable[[int, Any], Any]
    fail: Callable[[int, cpb.CallError], Any]


_END = object()


async def _run_call(
    how: CallsMethod, request: Any, ctx: CallContext, emit: Callable[[Any], None], outcome: InnerOutcome
) -> MeshError | None:
    """Run one call's handler to its end, emitting its messages; return its failure, if any.

    None when it answered, or was cancelled (the caller stopped waiting, the stream ended:
    it then sends nothing more). A handler still running at the call's deadline is
    cancelled and answered DEADLINE_EXCEEDED; an unexpected exception is INTERNAL (logged).
    """
    failed: MeshError
    try:
        async with asyncio.timeout_at(ctx.deadline):
            async for message in how.handle(request, ctx):
                emit(message)
        return None
    except TimeoutError:
        failed = MeshError(Status.DEADLINE_EXCEEDED, Reason.CALLER_DEADLINE, "the call's deadline passed")
    except MeshError as err:
        failed = err
    except asyncio.CancelledError:
        outcome.cancelled()
        return None
    except Exception as exc:  # noqa: BLE001 - a server never dies of a request
        if (unavailable := database_unavailable(exc)) is not None:
            failed = unavailable
        else:
            log.exception("unhandled error in %s/%s", how.service, how.method)
            failed = MeshError(Status.INTERNAL, Reason.INTERNAL, "internal error")
    outcome.fail(failed)
    return failed


async def serve_calls(
    requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, how: CallsMethod
) -> AsyncIterator[Any]:
    """Serve a stream of calls (see the module docstring); yields the response envelopes.

    `requests` are the request envelopes (a `header` and the call's fields); `how.handle`
    gets the whole envelope and reads what it needs of it.
    """
    loop = asyncio.get_running_loop()
    out: asyncio.Queue[Any] = asyncio.Queue()
    running: dict[int, asyncio.Task[None]] = {}
    finished_reading = False
    draining = False

    async def one(call_id: int, request: Any, deadline: float | None, traceparent: str) -> None:
        try:
            with inner_call(how.service, how.method, traceparent) as outcome:

                def emit(message: Any) -> None:
                    out.put_nowait(how.answer(call_id, message))

                failed = await _run_call(how, request, CallContext(context, deadline), emit, outcome)
                if failed is not None:
                    out.put_nowait(how.fail(call_id, call_error(failed)))
        finally:
            running.pop(call_id, None)
            if finished_reading and not running:
                out.put_nowait(_END)

    async def read() -> None:
        nonlocal finished_reading
        try:
            async for request in requests:
                header = request.header
                if header.cancel:
                    task = running.get(header.call_id)
                    if task is not None:
                        task.cancel()
                    continue
                if header.call_id in running:
                    # An answer tagged with this id would be a second final message of the
                    # call in flight: a caller that reuses a live id has lost track of its
                    # calls, so the stream ends (every call on it cancelled).
                    raise MeshError(
                        Status.INVALID_ARGUMENT,
                        Reason.INVALID_ID,
                        f"call id {header.call_id} is already in flight on this stream",
                        {"field": "header.call_id"},
                    )
                if header.call_id == 0:
                    err = MeshError(
                        Status.INVALID_ARGUMENT,
                        Reason.INVALID_ID,
                        "call id 0 cannot open a call",
                        {"field": "header.call_id"},
                    )
                    out.put_nowait(how.fail(header.call_id, call_error(err)))
                    continue
                deadline = None
                if header.HasField("timeout"):
                    deadline = loop.time() + max(0.0, header.timeout.ToNanoseconds() / 1e9)
                running[header.call_id] = loop.create_task(
                    one(header.call_id, request, deadline, header.traceparent)
                )
        except BaseException as exc:  # the stream's own failure: end it with that
            if not (draining and isinstance(exc, asyncio.CancelledError)):
                out.put_nowait(exc)
            raise
        finally:
            finished_reading = True
            if not running:
                out.put_nowait(_END)

    async def stop_reading(stopping: asyncio.Event) -> None:
        nonlocal draining
        await stopping.wait()
        draining = True
        reader.cancel()  # a request not read yet is never run here

    reader = loop.create_task(read())
    stopping = server_stopping()
    drain = loop.create_task(stop_reading(stopping)) if stopping is not None else None
    try:
        while True:
            item = await out.get()
            if item is _END:
                if finished_reading and not running:
                    break
                continue
            if isinstance(item, BaseException):
                if isinstance(item, asyncio.CancelledError):
                    break
                raise item
            yield item
    finally:
        reader.cancel()
        if drain is not None:
            drain.cancel()
        for task in list(running.values()):
            task.cancel()
