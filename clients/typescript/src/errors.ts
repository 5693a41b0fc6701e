/**
 * Typed errors of the agentrt mesh.
 *
 * Every failed call of `AgentrtClient` rejects with an `AgentrtError`: the gRPC status code,
 * and the stable `reason` of the `google.rpc.ErrorInfo` detail (domain "agentrt.dev") as a
 * value of the generated enum `ErrorReason` (docs/errors.md has the table). A reason newer
 * than these contracts reads as `ErrorReason.ERROR_REASON_UNSPECIFIED` with its text in
 * `reasonName`; an error with no ErrorInfo (the transport failed) has both empty.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorReason } from "./gen/agentrt/v1/error_reason_pb.js";
import { ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** The ErrorInfo domain of every agentrt error. */
export const ERROR_DOMAIN = "agentrt.dev";

/** A failed call: status code, typed reason, metadata and retry delay. */
export class AgentrtError extends Error {
  /** The gRPC status code (the numbers of gRPC: `Code.NotFound` is 5). */
  readonly code: Code;
  /** The reason as the contract's enum; ERROR_REASON_UNSPECIFIED when absent or unknown. */
  readonly reason: ErrorReason;
  /** The reason exactly as sent, e.g. "RUN_NOT_FOUND"; "" when the error carried none. */
  readonly reasonName: string;
  /** ErrorInfo metadata, e.g. `{ field: "run_id" }`. */
  readonly metadata: Readonly<Record<string, string>>;
  /** How long to wait before retrying, from RetryInfo, in milliseconds; undefined when not said. */
  readonly retryAfterMs: number | undefined;
  /** The user-safe message of the status, without the code prefix. */
  readonly rawMessage: string;

  constructor(
    code: Code,
    rawMessage: string,
    reasonName: string,
    metadata: Record<string, string>,
    retryAfterMs: number | undefined,
    cause?: unknown,
  ) {
    const tag = reasonName ? ` ${reasonName}` : "";
    super(`${codeName(code)}${tag}: ${rawMessage}`, { cause });
    this.name = "AgentrtError";
    this.code = code;
    this.rawMessage = rawMessage;
    this.reasonName = reasonName;
    this.reason = reasonFromName(reasonName);
    this.metadata = metadata;
    this.retryAfterMs = retryAfterMs;
  }

  /** The status code's gRPC name, e.g. "NOT_FOUND". */
  get codeName(): string {
    return codeName(this.code);
  }
}

/** Return the gRPC name of a status code, e.g. `codeName(Code.NotFound)` is "NOT_FOUND". */
export function codeName(code: Code): string {
  const camel = Code[code] ?? "Unknown";
  return camel === "Canceled" ? "CANCELLED" : camel.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/** Return the ErrorReason value named `name`; ERROR_REASON_UNSPECIFIED for "" or a newer reason. */
export function reasonFromName(name: string): ErrorReason {
  const value = (ErrorReason as unknown as Record<string, number | undefined>)[name];
  return typeof value === "number" ? (value as ErrorReason) : ErrorReason.ERROR_REASON_UNSPECIFIED;
}

/** Turn anything a Connect call threw into an AgentrtError (an AgentrtError passes through). */
export function toAgentrtError(thrown: unknown): AgentrtError {
  if (thrown instanceof AgentrtError) {
    return thrown;
  }
  const err = ConnectError.from(thrown);
  let reasonName = "";
  let metadata: Record<string, string> = {};
  for (const info of err.findDetails(ErrorInfoSchema)) {
    if (info.domain === ERROR_DOMAIN) {
      reasonName = info.reason;
      metadata = { ...info.metadata };
    }
  }
  let retryAfterMs: number | undefined;
  for (const retry of err.findDetails(RetryInfoSchema)) {
    const delay = retry.retryDelay;
    if (delay) {
      retryAfterMs = Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6);
    }
  }
  return new AgentrtError(err.code, err.rawMessage, reasonName, metadata, retryAfterMs, thrown);
}
