/**
 * Following a run's (or a session's) events with automatic resume (seed 004 §2.11).
 *
 * `followEvents` opens StreamRunEvents after a seq (asking for batched messages: the events a run
 * publishes together share one; `eventsOf` unpacks a message) and yields every event in order. When the
 * stream breaks (the connection drops, the server restarts or drains) it reopens the stream
 * with the last seq it yielded, so the server replays exactly the rest: nothing is repeated,
 * nothing is skipped. What the server can no longer deliver arrives as an event whose payload
 * is `gap` (EventGap): it is yielded like any other event, never hidden, and the cursor moves
 * to its `lastGood` so a reset timeline is followed from there. A run's iteration ends after
 * its `streamEnd` event; a session's follows until the caller stops iterating or aborts.
 */
import { Code } from "@connectrpc/connect";
import type { Client } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import type { RunEvent, StreamRunEventsResponse } from "./gen/agentrt/v1/run_service_pb.js";
import { RunService, StreamRunEventsRequestSchema } from "./gen/agentrt/v1/run_service_pb.js";
import { AgentrtError, toAgentrtError } from "./errors.js";

/** What to follow: exactly one of a run or a session. */
export type EventTarget = { runId: string; sessionId?: never } | { sessionId: string; runId?: never };

/** A reopened stream, reported to `onReconnect` before the new stream is opened. */
export interface Reconnect {
  /** Consecutive failures so far (1 = the first reopen since the last event). */
  attempt: number;
  /** The seq the stream is reopened after. */
  afterSeq: bigint;
  /** Why the previous stream ended: the error, or undefined when it closed before its end. */
  error: AgentrtError | undefined;
}

/** Options of `followEvents`. */
export interface FollowOptions {
  /** Deliver events with a seq greater than this; default 0 (from the start). */
  afterSeq?: bigint;
  /** Consecutive reopen attempts without a new event before giving up; default 8. */
  maxReconnects?: number;
  /** First backoff between reopen attempts, in milliseconds, doubled each time up to 2 s; default 100. */
  backoffMs?: number;
  /** Called before each reopen. */
  onReconnect?: (info: Reconnect) => void;
  /** Aborting ends the iteration (it then returns without an error). */
  signal?: AbortSignal;
}

/** The events one StreamRunEvents message carries, in seq order: `event`, then `moreEvents`. */
export function eventsOf(message: StreamRunEventsResponse): RunEvent[] {
  return message.event === undefined ? [] : [message.event, ...message.moreEvents];
}

/**
 * Status codes after which a broken stream is reopened: the transport or the server went away.
 * CANCELLED is among them because a dropped HTTP/2 connection reads as a cancelled stream; the
 * caller's own abort (`signal`) ends the iteration instead.
 */
const RECONNECT_CODES: ReadonlySet<Code> = new Set([
  Code.Unavailable,
  Code.Internal,
  Code.Unknown,
  Code.Aborted,
  Code.Canceled,
]);

/**
 * Yield the events of a run (or a session) after `afterSeq`, reopening the stream when it breaks.
 *
 * @throws AgentrtError the request was refused (e.g. NOT_FOUND with reason RUN_NOT_FOUND), or
 *   the stream broke more than `maxReconnects` times in a row without a new event.
 */
export async function* followEvents(
  runs: Client<typeof RunService>,
  target: EventTarget,
  options: FollowOptions = {},
): AsyncGenerator<RunEvent, void, undefined> {
  const maxReconnects = options.maxReconnects ?? 8;
  const backoffMs = options.backoffMs ?? 100;
  const isRun = target.runId !== undefined;
  let cursor = options.afterSeq ?? 0n;
  let failures = 0;
  let ended = false;
  for (;;) {
    let error: AgentrtError | undefined;
    try {
      const request = create(StreamRunEventsRequestSchema, {
        runId: target.runId ?? "",
        sessionId: target.sessionId ?? "",
        afterSeq: cursor,
        batchEvents: true,
      });
      for await (const message of runs.streamRunEvents(request, { signal: options.signal })) {
        for (const event of eventsOf(message)) {
          if (ended) {
            continue;
          }
          if (event.payload.case === "gap") {
            // A gap carries seq = its lastGood; a lastGood below the cursor is a reset of the
            // timeline, which is followed again from there.
            if (event.payload.value.lastGood < cursor) {
              cursor = event.payload.value.lastGood;
            }
            yield event;
            continue;
          }
          if (event.seq <= cursor) {
            continue; // a replay overlapping what was already yielded
          }
          cursor = event.seq;
          failures = 0;
          yield event;
          if (isRun && event.payload.case === "streamEnd") {
            ended = true; // the server closes the stream next; reading on ends it with OK
          }
        }
      }
      if (ended) {
        return;
      }
    } catch (thrown) {
      if (options.signal?.aborted || ended) {
        return; // aborted, or the stream broke after its end (nothing of the run is missing)
      }
      error = toAgentrtError(thrown);
      if (!RECONNECT_CODES.has(error.code)) {
        throw error;
      }
    }
    if (options.signal?.aborted) {
      return;
    }
    failures += 1;
    if (failures > maxReconnects) {
      throw (
        error ??
        new AgentrtError(Code.Unavailable, `the event stream kept closing before its end (after seq ${cursor})`, "", {}, undefined)
      );
    }
    options.onReconnect?.({ attempt: failures, afterSeq: cursor, error });
    await sleep(Math.min(backoffMs * 2 ** (failures - 1), 2000), options.signal);
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
