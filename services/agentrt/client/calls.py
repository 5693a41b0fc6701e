"""Streams of calls, the caller's half: many calls of one method over one long-lived stream.

The server's half and why it exists are in `agentrt.mesh.calls`. A `CallStream` keeps one
bidi stream open to a service (opened at the first call, on the channel's balancing) and
sends each call as a request opening with a `CallHeader`; a reader routes each answer to
its call by id. Several calls may be in flight at once.

What a caller sees of `call()` is what the call's own RPC would give it:
- the answer; the call's own failure as its MeshError (status, reason, metadata, RetryInfo);
- progress messages (tool output, model deltas) to `on_event`, in order, before the answer;
- its deadline: past `timeout` the call is cancelled at the server and raises
  DEADLINE_EXCEEDED; a caller cancelled while it waits cancels the call at the server too.
What is the stream's, not the call's:
- `StreamBroken` when the stream ended below any answer (the service's replica went away,
  or stopped: UNAVAILABLE without a reason, CANCELLED by the server, an end with calls in
  flight). The call may or may not have run; re-sending it is the caller's decision (each
  caller here sends only calls that are safe twice: fenced, journaled or keyed). The next
  call opens a new stream, on any replica;
- `CallsUnsupported` when the service does not serve the stream (an older version:
  UNIMPLEMENTED): the caller falls back to the RPC of the call;
- a stream refused as a whole (UNAUTHENTICATED, PERMISSION_DENIED, ...) fails the calls in
  flight with that error.
A stream older than `max_age_s` takes no new call (the next opens a fresh one, so a
long-lived caller still moves to new replicas when the service scales) and is closed once
its calls have answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from typing import Any

import grpc

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.mesh.status import from_call_error, from_rpc_error, reason_of
from agentrt.v1 import common_pb2 as cpb

#: A call's kind of message, as `split` reads it off an answer envelope.
EVENT, FINAL, ERROR = "event", "final", "error"
_BROKEN = "broken"
#: How long a stream takes new calls, seconds.
MAX_AGE_S = 60.0
#: How long a call whose request could not be written waits for the stream's status, seconds.
_STATUS_WAIT_S = 5.0


class StreamBroken(Exception):
    """The stream carrying a call ended below any answer to it (see the module docstring)."""


class CallsUnsupported(Exception):
    """The service does not serve this stream of calls (UNIMPLEMENTED): use the plain RPC."""


def _breaks_stream(err: grpc.aio.AioRpcError) -> bool:
    """True for a stream's end that says nothing about its calls (transport, server stop)."""
    code = err.code()
    return (code == grpc.StatusCode.UNAVAILABLE and not reason_of(err)) or code == grpc.StatusCode.CANCELLED


class _Stream:
    """One open bidi stream and the calls in flight on it."""

    def __init__(self, call: Any, split: Callable[[Any], tuple[int, str, Any]]) -> None:
        self.call = call
        self.opened = time.monotonic()
        self.pending: dict[int, asyncio.Queue[tuple[str, Any]]] = {}
        self.ended = False
        self.retired = False
        self._lock = asyncio.Lock()
        self._split = split
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def send(self, request: Any) -> None:
        async with self._lock:  # one write in flight at a time on a grpc.aio stream
            await self.call.write(request)

    async def _read(self) -> None:
        failure: tuple[str, Any] = (_BROKEN, None)
        try:
            async for answer in self.call:
                call_id, kind, value = self._split(answer)
                queue = self.pending.get(call_id)
                if queue is not None:
                    queue.put_nowait((kind, value))
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                failure = ("unsupported", err)
            elif not _breaks_stream(err):
                failure = ("refused", err)
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - any other end breaks the stream
            pass
        finally:
            self.ended = True
            for queue in self.pending.values():
                queue.put_nowait(failure)

    def close_when_idle(self) -> None:
        """Half-close once no call is in flight (the server then ends the stream OK)."""
        if not self.pending and not self.ended:
            self.ended = True
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().create_task(self._done_writing())

    async def _done_writing(self) -> None:
        with contextlib.suppress(Exception):
            async with self._lock:
                await self.call.done_writing()


class CallStream:
    """Calls of one method over one long-lived stream (see the module docstring)."""

    def __init__(
        self,
        open_stream: Callable[[], Any],
        request: Callable[[cpb.CallHeader, Any], Any],
        split: Callable[[Any], tuple[int, str, Any]],
        *,
        max_age_s: float = MAX_AGE_S,
    ) -> None:
        """Prepare the stream (nothing opens before the first call).

        Args:
            open_stream: opens the bidi call (the stub's method with the caller's metadata).
            request: (header, the call's payload) -> the request envelope.
            split: an answer envelope -> (call_id, EVENT | FINAL | ERROR, its value; for
                ERROR a CallError).
            max_age_s: how long a stream takes new calls, seconds.
        """
        self._open = open_stream
        self._request = request
        self._split = split
        self._max_age_s = max_age_s
        self._stream: _Stream | None = None
        self._ids = itertools.count(1)
        #: Streams opened so far (operators and tests).
        self.opened = 0

    def _live(self) -> _Stream:
        stream = self._stream
        if stream is not None and not stream.ended:
            if time.monotonic() - stream.opened < self._max_age_s:
                return stream
            stream.retired = True
            stream.close_when_idle()
        stream = self._stream = _Stream(self._open(), self._split)
        self.opened += 1
        return stream

    async def call(
        self,
        payload: Any,
        *,
        timeout: float | None = None,
        on_event: Callable[[Any], None] | None = None,
        traceparent: str = "",
    ) -> Any:
        """Send one call and return its answer (see the module docstring).

        Args:
            payload: the call's request (what the envelope carries besides its header).
            timeout: the call's deadline, seconds from now; None = none.
            on_event: called with each progress message, in order, before the answer.
            traceparent: the caller's span for the call (W3C), "" when not traced.

        Raises:
            MeshError: the call's failure; DEADLINE_EXCEEDED past `timeout`; a stream
                refused as a whole, as its status.
            StreamBroken: the stream ended below any answer (the call may have run).
            CallsUnsupported: the service does not serve the stream.
        """
        stream = self._live()
        call_id = next(self._ids)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stream.pending[call_id] = queue
        header = cpb.CallHeader(call_id=call_id, traceparent=traceparent)
        if timeout is not None:
            header.timeout.FromNanoseconds(int(max(0.0, timeout) * 1e9))
        answered = False
        try:
            try:
                await stream.send(self._request(header, payload))
            except Exception as exc:  # noqa: BLE001 - a stream that cannot be written to is gone
                # Its status says why (refused, unsupported, broken): the reader reads it and
                # tells this call's queue, as it tells every call in flight.
                answered = True
                await asyncio.wait({stream.reader}, timeout=_STATUS_WAIT_S)
                if queue.empty():
                    stream.ended = True
                    raise StreamBroken(f"the stream could not carry the call: {exc!r}") from exc
                return self._outcome(*queue.get_nowait())
            async with asyncio.timeout(timeout):
                while True:
                    kind, value = await queue.get()
                    if kind == EVENT:
                        if on_event is not None:
                            on_event(value)
                        continue
                    answered = True
                    return self._outcome(kind, value)
        except TimeoutError:
            raise MeshError(Status.DEADLINE_EXCEEDED, Reason.INTERNAL, "Deadline Exceeded") from None
        finally:
            stream.pending.pop(call_id, None)
            if not answered and not stream.ended:
                self._cancel(stream, call_id)
            if stream.retired:
                stream.close_when_idle()

    @staticmethod
    def _outcome(kind: str, value: Any) -> Any:
        if kind == FINAL:
            return value
        if kind == ERROR:
            raise from_call_error(value)
        if kind == "unsupported":
            raise CallsUnsupported(str(value))
        if kind == "refused":
            raise from_rpc_error(value)
        raise StreamBroken(str(value) if value is not None else "the stream ended before the call's answer")

    def _cancel(self, stream: _Stream, call_id: int) -> None:
        """Tell the server the call is no longer waited for (in the background)."""
        request = self._request(cpb.CallHeader(call_id=call_id, cancel=True), None)

        async def send() -> None:
            with contextlib.suppress(Exception):
                await stream.send(request)

        task = asyncio.get_running_loop().create_task(send())
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)

    def close(self) -> None:
        """Close the stream once its calls have answered (the server ends it OK)."""
        if self._stream is not None:
            self._stream.retired = True
            self._stream.close_when_idle()
            self._stream = None


#: Cancel messages in flight (kept referenced until sent).
_BACKGROUND: set[asyncio.Task[None]] = set()
