"""What the callers of one journaled model call share: the flight, replays, fingerprints.

- `fingerprint`: the identity of a request under its key (a key reused by another request
  is refused, never answered with the first one's response).
- `replay_items`: the deltas a stream of a recorded response carries (one per text,
  thinking and tool-call block, in block order), before its final.
- `joined`: deltas that are ready together as fewer messages (what a follower sends).
- `Flight`: one key's work in one gateway process. Its callers follow it: the deltas so
  far, then the final (or the error). A caller that leaves does not end it.
- `Renewal`: the lease of the flight's key renewed while its provider call runs.

A follower sends, each time it wakes, every delta the flight has gathered since, joined:
a provider's events that arrived in one read are one message instead of one each, and a
delta is never held back to wait for another (only what is already there is joined).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from agentrt.core.errors import MeshError, Reason, invalid, quote
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g


def fingerprint(request: g.ModelRequest) -> str:
    """Return the hex SHA-256 of request without its key, tenant and max_queue_wait.

    request is left as it was (the three fields are cleared for the hash and put back, with
    nothing awaited in between).
    """
    key, tenant = request.idempotency_key, request.tenant
    wait = None
    if request.HasField("max_queue_wait"):
        wait = type(request.max_queue_wait)()
        wait.CopyFrom(request.max_queue_wait)
    request.idempotency_key = ""
    request.tenant = ""
    request.ClearField("max_queue_wait")
    try:
        return hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()
    finally:
        request.idempotency_key, request.tenant = key, tenant
        if wait is not None:
            request.max_queue_wait.CopyFrom(wait)


def replay_items(response: c.ModelResponse) -> list[g.StreamGenerateResponse]:
    """Return the deltas a stream of response would have carried, in block order (no final)."""
    items: list[g.StreamGenerateResponse] = []
    calls = 0
    for block in response.content:
        kind = block.WhichOneof("block")
        if kind == "text" and block.text.text:
            items.append(g.StreamGenerateResponse(text_delta=block.text.text))
        elif kind == "thinking" and block.thinking.text:
            items.append(g.StreamGenerateResponse(thinking_delta=block.thinking.text))
        elif kind == "tool_use":
            delta = g.ToolCallDelta(
                index=calls, name=block.tool_use.name, arguments_delta=block.tool_use.arguments
            )
            items.append(g.StreamGenerateResponse(tool_call_delta=delta))
            calls += 1
    return items


def _continues(last: g.StreamGenerateResponse, item: g.StreamGenerateResponse) -> bool:
    """Whether item continues last: text after text, thinking after thinking, or more of one call."""
    kind = item.WhichOneof("event")
    if kind != last.WhichOneof("event"):
        return False
    if kind == "tool_call_delta":
        # A fragment with a name opens a call; only nameless ones continue the same index.
        return item.tool_call_delta.index == last.tool_call_delta.index and not item.tool_call_delta.name
    return kind in ("text_delta", "thinking_delta")


def _join(run: Sequence[g.StreamGenerateResponse]) -> g.StreamGenerateResponse:
    if len(run) == 1:
        return run[0]
    first = run[0]
    kind = first.WhichOneof("event")
    if kind == "text_delta":
        return g.StreamGenerateResponse(text_delta="".join(m.text_delta for m in run))
    if kind == "thinking_delta":
        return g.StreamGenerateResponse(thinking_delta="".join(m.thinking_delta for m in run))
    delta = first.tool_call_delta
    return g.StreamGenerateResponse(
        tool_call_delta=g.ToolCallDelta(
            index=delta.index,
            name=delta.name,
            arguments_delta="".join(m.tool_call_delta.arguments_delta for m in run),
        )
    )


def joined(items: Sequence[g.StreamGenerateResponse]) -> list[g.StreamGenerateResponse]:
    """Return items with each run of deltas that continue one another as one message, in order.

    Text deltas join the text deltas right before them, thinking deltas likewise, and a
    tool-call fragment without a name the fragments of the same call (index) right before it
    (the name kept, the arguments concatenated). So the text, the thinking and each call's
    name and arguments read from the result are those read from items; nothing is
    reordered. A run of one is the item itself; joined runs are new messages (items are
    not modified).
    """
    out: list[g.StreamGenerateResponse] = []
    run: list[g.StreamGenerateResponse] = []
    for item in items:
        if run and not _continues(run[-1], item):
            out.append(_join(run))
            run = []
        run.append(item)
    if run:
        out.append(_join(run))
    return out


def reused(key: str) -> MeshError:
    """Return INVALID_ARGUMENT/IDEMPOTENCY_KEY_REUSED for key (field `idempotency_key`)."""
    return invalid(
        Reason.IDEMPOTENCY_KEY_REUSED,
        f"idempotency_key {quote(key)} was used by another model request; use a new key for a new call",
        field="idempotency_key",
    )


class Flight:
    """One key's work in this process, and what its callers follow."""

    def __init__(self, fp: str, streamed: bool) -> None:
        """Start a flight for a request of fingerprint fp (`streamed`: asked with StreamGenerate)."""
        self.fingerprint = fp
        self.streamed = streamed  # ask with StreamGenerate (live deltas) rather than Generate
        self.deltas: list[g.StreamGenerateResponse] = []
        self.final: g.GenerateResponse | None = None
        self.error: BaseException | None = None
        self.replayed = False
        self.asking = False
        #: The provider answered (its final is here); only the record is left: nothing to stop.
        self.answered = False
        self.subscribers = 0
        self.task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def paid(self) -> None:
        """Mark the provider's answer here (before the limiter settles): a cancel stops nothing now."""
        self.answered = True

    @property
    def done(self) -> bool:
        """True once the flight has its final or its error."""
        return self.final is not None or self.error is not None

    def _changed(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def push(self, item: g.StreamGenerateResponse) -> None:
        """Add a live delta of the provider's stream."""
        self.deltas.append(item)
        self._changed()

    def finish(self, final: g.GenerateResponse, replayed: bool) -> None:
        """End with final (`replayed`: from the journal); synthesize deltas if none were live."""
        if not self.deltas:  # asked with Generate, or answered from the journal
            self.deltas = replay_items(final.response)
        self.final, self.replayed = final, replayed
        self._changed()

    def fail(self, error: BaseException) -> None:
        """End with error (no-op once ended): every follower raises it."""
        if not self.done:
            self.error = error
            self._changed()

    def answer(self, origin: bool) -> g.GenerateResponse:
        """Return a copy of the final; `replayed` for all but the caller that started an ask."""
        assert self.final is not None
        out = g.GenerateResponse()
        out.CopyFrom(self.final)
        out.replayed = self.replayed or not origin
        return out

    async def wait(self) -> None:
        """Wait for the end; raise the flight's error if it failed."""
        while not self.done:
            await self._wake.wait()
        if self.error is not None:
            raise self.error

    async def follow(self, origin: bool) -> AsyncIterator[g.StreamGenerateResponse]:
        """Yield every delta from the first, as they come, then the final; or raise the error.

        Each time it wakes, the deltas gathered since are yielded `joined` (see the module
        docstring): the same text, thinking and calls, in fewer messages.
        """
        sent = 0
        while True:
            wake = self._wake
            if sent < len(self.deltas):
                ready = self.deltas[sent:]
                sent += len(ready)
                for item in joined(ready):
                    yield item
                continue  # more may have come while the caller took these
            if self.error is not None:
                raise self.error
            if self.final is not None:
                yield g.StreamGenerateResponse(final=self.answer(origin))
                return
            await wake.wait()


class Renewal:
    """A held key's lease renewed every `period` seconds while its call runs.

    One timer per call, and a task only when a renewal is due: an instant model's call ends
    long before its first renewal, so it costs a timer set and cancelled, not a task started
    and cancelled. `stop` ends it, a renewal in flight included.
    """

    def __init__(self, period: float, renew: Callable[[], Awaitable[bool]]) -> None:
        self._period = period
        self._renew = renew
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._timer = asyncio.get_running_loop().call_later(period, self._due)

    def _due(self) -> None:
        if not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        if await self._renew() and not self._stopped:
            self._timer = asyncio.get_running_loop().call_later(self._period, self._due)

    def stop(self) -> None:
        """Renew no more (a renewal in flight is cancelled)."""
        self._stopped = True
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
