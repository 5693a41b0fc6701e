"""Following a run's (or a session's) events with automatic resume (seed 004 §2.11).

`follow_events` opens StreamRunEvents after a seq (asking for batched messages: the events a
run publishes together share one; `events_of` unpacks a message) and yields every event in order. When the
stream breaks (the connection drops, the server restarts or drains) it reopens it with the
last seq it yielded, so the server replays exactly the rest: nothing is repeated, nothing is
skipped. What the server can no longer deliver arrives as an event whose payload is `gap`
(EventGap): it is yielded like any other, never hidden, and the cursor moves to its
`last_good` so a reset timeline is followed from there. A run's iteration ends after its
`stream_end` event; a session's follows until the caller stops iterating.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc

from agentrt.client.errors import AgentrtError, to_agentrt_error
from agentrt.v1 import run_service_pb2, run_service_pb2_grpc

#: Status codes after which a broken stream is reopened: the transport or the server went away.
RECONNECT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.ABORTED}
)


def events_of(message: run_service_pb2.StreamRunEventsResponse) -> list[run_service_pb2.RunEvent]:
    """Return the events one StreamRunEvents message carries, in seq order.

    One (`event`), or with `batch_events` requested, `event` and then `more_events`.
    """
    return [message.event, *message.more_events] if message.more_events else [message.event]


@dataclass(frozen=True)
class Reconnect:
    """A reopened stream, reported to `on_reconnect` before the new stream is opened.

    Attributes:
        attempt: consecutive failures so far (1 = the first reopen since the last event).
        after_seq: the seq the stream is reopened after.
        error: why the previous stream ended; None when it closed before its end.
    """

    attempt: int
    after_seq: int
    error: AgentrtError | None


async def follow_events(
    runs: run_service_pb2_grpc.RunServiceStub,
    *,
    run_id: str = "",
    session_id: str = "",
    after_seq: int = 0,
    max_reconnects: int = 8,
    backoff_seconds: float = 0.1,
    on_reconnect: Callable[[Reconnect], None] | None = None,
) -> AsyncIterator[run_service_pb2.RunEvent]:
    """Yield the events of a run (or a session) after `after_seq`, reopening the stream when it breaks.

    Args:
        runs: a RunService stub (its channel carries the token and tenant).
        run_id: the run to follow; or
        session_id: the session to follow (exactly one of the two).
        after_seq: deliver events with a greater seq.
        max_reconnects: consecutive reopen attempts without a new event before giving up.
        backoff_seconds: first pause between attempts, doubled each time up to 2 s.
        on_reconnect: called before each reopen.

    Yields:
        RunEvents, seq increasing, gap events (seq = their last_good) where events were lost.

    Raises:
        ValueError: not exactly one of run_id and session_id.
        AgentrtError: the request was refused (e.g. NOT_FOUND/RUN_NOT_FOUND), or the stream
            broke more than `max_reconnects` times in a row.
    """
    if bool(run_id) == bool(session_id):
        raise ValueError("follow_events needs exactly one of run_id and session_id")
    cursor, failures, ended = after_seq, 0, False
    while True:
        error: AgentrtError | None = None
        request = run_service_pb2.StreamRunEventsRequest(
            run_id=run_id, session_id=session_id, after_seq=cursor, batch_events=True
        )
        try:
            async for message in runs.StreamRunEvents(request):
                for event in events_of(message):
                    if ended:
                        continue
                    if event.HasField("gap"):
                        # A gap carries seq = its last_good; a last_good below the cursor is a
                        # reset of the timeline, followed again from there.
                        cursor = min(cursor, event.gap.last_good)
                        yield event
                        continue
                    if event.seq <= cursor:
                        continue  # a replay overlapping what was already yielded
                    cursor, failures = event.seq, 0
                    yield event
                    if run_id and event.HasField("stream_end"):
                        ended = True  # the server closes the stream next; reading on ends it with OK
            if ended:
                return
        except grpc.RpcError as exc:
            if ended:
                return  # the stream broke after its end: nothing of the run is missing
            error = to_agentrt_error(exc)
            if error.code not in RECONNECT_CODES:
                raise error from exc
        failures += 1
        if failures > max_reconnects:
            raise error or AgentrtError(
                grpc.StatusCode.UNAVAILABLE,
                0,
                "",
                f"the event stream kept closing before its end (after seq {cursor})",
            )
        if on_reconnect is not None:
            on_reconnect(Reconnect(failures, cursor, error))
        await asyncio.sleep(min(backoff_seconds * 2 ** (failures - 1), 2.0))  # backoff, not a wait for state
