"""Streams of calls between services hosted in one process: the same calls, no wire.

When the run loop's peers (gateway, tools, sessions) are served by the same process as the
runs service (`agentrt serve all`, `agentrt up --one-process`: docs/decisions/0056), a turn's
three calls (StreamGenerate, ExecuteTool, AppendEntries) need not cross a socket, a
protobuf encoding and a second event-loop wake-up each. `LocalCalls` opens a `LocalStream`
instead of a gRPC bidi call: an object with the half of grpc.aio's stream-stream call that
`agentrt.client.calls.CallStream` uses (`write`, `done_writing`, async iteration), whose
other end is the peer's own `serve_calls` (mesh/calls.py) with the peer's own handler.

So every rule of a stream of calls holds unchanged, because the same code enforces it on
both sides: a call's answer, progress messages, failure (CallError), deadline, cancel
(`header.cancel`), the stream's age limit and its half-close. What differs from the wire:
- no bearer token is checked (the caller is this process's own runs service) and the
  tenant is the run's, set for the peer's handlers as the MeshInterceptor would;
- a request larger than the peer's `max_request_bytes` is refused as the interceptor
  refuses it (INVALID_ARGUMENT/REQUEST_TOO_LARGE), so a call answers what its RPC answers;
- messages are copied, not encoded: each envelope owns a copy of what it carries (protobuf
  copies a message set into a field), so neither side sees the other mutate one;
- when the peer stops (`close()`), its streams end below any answer, as a stopped server's
  RPCs do: the caller sees `StreamBroken` and re-sends the call, which every call sent this
  way allows (fenced, journaled or keyed; runs/peers/streams.py).

Invariant: a call over a local stream answers exactly what the same call over a gRPC stream
of calls answers (tests/service/mesh/test_local_calls.py, against the real session store).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from agentrt.core.errors import MeshError, Reason, invalid
from agentrt.mesh.calls import CallsMethod, serve_calls
from agentrt.mesh.context import TENANT_HEADER, set_server_stopping, set_tenant
from agentrt.mesh.server import MeshServer
from agentrt.mesh.status import to_grpc_status
from agentrt.mesh.telemetry.rpc import TelemetryServerInterceptor, serve_inner_calls

_END = object()


def _as_rpc_error(err: MeshError) -> grpc.aio.AioRpcError:
    """The AioRpcError a gRPC stream ended with `err` raises at its caller (status + ErrorInfo)."""
    status = to_grpc_status(err)
    return grpc.aio.AioRpcError(
        code=status.code,
        initial_metadata=grpc.aio.Metadata(),
        trailing_metadata=grpc.aio.Metadata(*status.trailing_metadata),
        details=status.details,
    )


class _LocalContext:
    """The part of a stream's ServicerContext that `serve_calls` reads (peer, metadata)."""

    def __init__(self, tenant: str) -> None:
        self._metadata = ((TENANT_HEADER, tenant),)

    def peer(self) -> str:
        return "local"

    def invocation_metadata(self) -> Any:
        return self._metadata


class LocalStream:
    """One stream of calls to a peer in this process (see the module docstring).

    Quacks like the grpc.aio stream-stream call `CallStream` holds: `write()` a request
    envelope, `done_writing()` to half-close, iterate for the answer envelopes. The peer's
    `serve_calls` runs in a task of its own, in a context of its own with the run's tenant
    (not the caller's context variables), as a server's handler would.
    """

    def __init__(
        self,
        how: CallsMethod | None,
        tenant: str,
        max_request_bytes: int,
        on_end: Callable[[LocalStream], None],
        telemetry: TelemetryServerInterceptor | None = None,
    ) -> None:
        """Open the stream (`how` None: the peer has stopped, and the stream ends at once)."""
        self._how = how
        self._max = max_request_bytes
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._answers: asyncio.Queue[Any] = asyncio.Queue()
        self._closed = False
        self._on_end = on_end
        context = contextvars.Context()
        context.run(set_tenant, tenant)
        if telemetry is not None:
            context.run(serve_inner_calls, telemetry)
        self._pump = asyncio.get_running_loop().create_task(
            self._serve(_LocalContext(tenant)), context=context
        )

    async def _incoming(self) -> AsyncIterator[Any]:
        while True:
            request = await self._requests.get()
            if request is _END:
                return
            size = request.ByteSize()
            if size > self._max:
                raise invalid(
                    Reason.REQUEST_TOO_LARGE,
                    f"request is {size} bytes; the limit is {self._max} bytes",
                    limit_bytes=str(self._max),
                )
            yield request

    async def _serve(self, context: _LocalContext) -> None:
        ended: Any = _END
        try:
            if self._how is None:
                raise ConnectionError("the service in this process has stopped")
            set_server_stopping(None)  # not a gRPC stream: none the caller's task may carry
            async for answer in serve_calls(self._incoming(), context, self._how):  # type: ignore[arg-type]
                self._answers.put_nowait(answer)
        except BaseException as exc:  # noqa: BLE001 - the stream's own end, told to its reader
            ended = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._answers.put_nowait(ended)
            self._on_end(self)

    async def write(self, request: Any) -> None:
        """Send one request envelope. Raises ConnectionError once the stream has ended."""
        if self._closed or self._pump.done():
            raise ConnectionError("the local stream of calls has ended")
        self._requests.put_nowait(request)

    async def done_writing(self) -> None:
        """Half-close: the peer ends the stream once every call on it has answered."""
        if not self._closed:
            self._closed = True
            self._requests.put_nowait(_END)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._answer_stream()

    async def _answer_stream(self) -> AsyncIterator[Any]:
        while True:
            answer = await self._answers.get()
            if answer is _END:
                return
            if isinstance(answer, MeshError):
                # The stream refused as a whole (as the interceptor ends a gRPC stream): the
                # caller reads it exactly as it reads that RPC's status.
                raise _as_rpc_error(answer)
            if isinstance(answer, BaseException):
                raise ConnectionError(f"the local stream of calls ended: {answer!r}") from answer
            yield answer

    def cancel(self) -> None:
        """End the stream below any answer (its calls in flight are cancelled)."""
        self._pump.cancel()


class LocalCalls:
    """The streams-of-calls methods of the peers hosted in this process, by peer name.

    Built by the process that hosts them (`agentrt.cli.serve_all`), handed to the runs
    service (`Peers(local=...)`), which then opens a `LocalStream` instead of a gRPC stream
    for those peers.
    """

    def __init__(self) -> None:
        self._methods: dict[str, tuple[CallsMethod, int, TelemetryServerInterceptor | None]] = {}
        self._live: dict[str, set[LocalStream]] = {}

    def host(
        self,
        peer: str,
        how: CallsMethod,
        max_request_bytes: int,
        telemetry: TelemetryServerInterceptor | None = None,
    ) -> None:
        """Serve `peer`'s calls from `how` (its servicer's CallsMethod) in this process.

        Args:
            peer: "sessions", "tools" or "gateway" (runs/peers/streams.py's names).
            how: the peer's stream-of-calls method (`MeshServer.calls()`).
            max_request_bytes: the peer's request bound (its `ServerConfig.max_request_bytes`).
            telemetry: the peer server's interceptor (`MeshServer.telemetry`): each call is
                counted and traced as its RPC there. None = not recorded.
        """
        self._methods[peer] = (how, max_request_bytes, telemetry)
        self._live.setdefault(peer, set())

    def host_server(self, peer: str, server: MeshServer) -> None:
        """Serve `peer`'s calls from its started `server` (its `calls`, request bound, telemetry).

        Raises:
            ValueError: the server has no stream-of-calls method to host.
        """
        if server.calls is None:
            raise ValueError(f"the {peer} server serves no stream of calls")
        self.host(peer, server.calls(), server.config.max_request_bytes, server.telemetry)

    def hosts(self, peer: str) -> bool:
        """True when `peer` is served in this process and has not stopped."""
        return peer in self._methods

    def opener(self, peer: str, tenant: str) -> Callable[[], LocalStream]:
        """Return what opens a stream of calls to `peer` for `tenant` (see `CallStream`)."""

        def open_stream() -> LocalStream:
            entry = self._methods.get(peer)
            how, limit, telemetry = entry if entry is not None else (None, 0, None)
            stream = LocalStream(how, tenant, limit, self._live[peer].discard, telemetry)
            self._live[peer].add(stream)
            return stream

        return open_stream

    def close(self, peer: str) -> None:
        """`peer` stopped: end its streams below their answers; open no new one."""
        self._methods.pop(peer, None)
        for stream in list(self._live.get(peer, ())):
            stream.cancel()
