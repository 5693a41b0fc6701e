"""What the callers of one journaled model call share: the flight, replays, fingerprints.

- `fingerprint`: the identity of a request under its key (a key reused by another request
  is refused, never answered with the first one's response).
- `replay_items`: the deltas a stream of a recorded response carries (one per text,
  thinking and tool-call block, in block order), before its final.
- `Flight`: one key's work in one gateway process. Its callers follow it: the deltas so
  far, then the final (or the error). A caller that leaves does not end it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

from agentrt.core.errors import MeshError, Reason, invalid, quote
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g


def fingerprint(request: g.ModelRequest) -> str:
    """Return the hex SHA-256 of request without its key, tenant and max_queue_wait."""
    copy = g.ModelRequest()
    copy.CopyFrom(request)
    copy.idempotency_key = ""
    copy.tenant = ""
    copy.ClearField("max_queue_wait")
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


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
        self.subscribers = 0
        self.task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

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
        """Yield every delta from the first, as they come, then the final; or raise the error."""
        sent = 0
        while True:
            wake = self._wake
            while sent < len(self.deltas):
                yield self.deltas[sent]
                sent += 1
            if self.error is not None:
                raise self.error
            if self.final is not None and sent == len(self.deltas):
                yield g.StreamGenerateResponse(final=self.answer(origin))
                return
            if sent == len(self.deltas):
                await wake.wait()
