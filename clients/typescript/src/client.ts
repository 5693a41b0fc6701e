/**
 * `AgentrtClient`: the typed layer over the generated RunService and SessionService clients.
 *
 * One gRPC (HTTP/2) transport per service address for the client's life; every call of
 * every kind (unary, server-, client- and bidi-streaming) carries `authorization: Bearer
 * <token>` and `x-agentrt-tenant: <tenant>` when they are set. Every method rejects with an
 * `AgentrtError` (status code + typed ErrorInfo reason). The generated clients stay
 * reachable as `runService` and `sessionService` for everything the layer does not wrap.
 */
import { create } from "@bufbuild/protobuf";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import type { Client, Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ToolResultSchema } from "./gen/agentrt/v1/common_pb.js";
import type {
  ApprovalDecisionSchema,
  Run,
  RunEvent,
  StartRunRequestSchema,
  StartRunResponse,
} from "./gen/agentrt/v1/run_service_pb.js";
import {
  CancelRunRequestSchema,
  GetRunRequestSchema,
  ResumeRunRequestSchema,
  RunService,
  StartRunRequestSchema as StartRunRequest,
} from "./gen/agentrt/v1/run_service_pb.js";
import type { Entry, Session } from "./gen/agentrt/v1/session_service_pb.js";
import {
  GetContextRequestSchema,
  GetSessionRequestSchema,
  ListEntriesRequestSchema,
  SessionService,
} from "./gen/agentrt/v1/session_service_pb.js";
import { toAgentrtError } from "./errors.js";
import type { EventTarget, FollowOptions } from "./events.js";
import { followEvents } from "./events.js";

/** The header that scopes every call to a tenant. */
export const TENANT_HEADER = "x-agentrt-tenant";

/** Where the services are and who is calling. */
export interface ClientOptions {
  /** RunService address: "host:port" or a URL ("http://host:port"). */
  runs: string;
  /** SessionService address; needed by the session methods only. */
  sessions?: string;
  /** Bearer token sent on every call; omitted when empty. */
  token?: string;
  /** Tenant sent on every call as x-agentrt-tenant; omitted (the server's default) when empty. */
  tenant?: string;
  /** Extra interceptors, run after the one that adds the token and tenant. */
  interceptors?: Interceptor[];
}

/** A decision on one pending call (ApprovalDecision): approve, or deny with a message for the model. */
export type Decision = MessageInitShape<typeof ApprovalDecisionSchema>;
/** A result of a client-declared tool call (ToolResult). */
export type ExternalResult = MessageInitShape<typeof ToolResultSchema>;
/** What StartRun takes: an agent (registered by name, or inline), the input, optionally a session. */
export type StartRunInit = MessageInitShape<typeof StartRunRequestSchema>;

/** Return an interceptor that adds the bearer token and the tenant to every request. */
export function metadataInterceptor(token = "", tenant = ""): Interceptor {
  return (next) => async (req) => {
    if (token && !req.header.has("authorization")) {
      req.header.set("authorization", `Bearer ${token}`);
    }
    if (tenant && !req.header.has(TENANT_HEADER)) {
      req.header.set(TENANT_HEADER, tenant);
    }
    return next(req);
  };
}

function baseUrl(address: string): string {
  return /^[a-z]+:\/\//i.test(address) ? address : `http://${address}`;
}

/** The agentrt mesh, as a TypeScript developer drives it. */
export class AgentrtClient {
  /** The generated RunService client (same transport, token and tenant). */
  readonly runService: Client<typeof RunService>;
  readonly #options: ClientOptions;
  #sessions: Client<typeof SessionService> | undefined;

  constructor(options: ClientOptions) {
    this.#options = options;
    this.runService = createClient(RunService, this.#transport(options.runs));
  }

  #transport(address: string): Transport {
    const { token = "", tenant = "", interceptors = [] } = this.#options;
    return createGrpcTransport({
      baseUrl: baseUrl(address),
      interceptors: [metadataInterceptor(token, tenant), ...interceptors],
    });
  }

  /** The generated SessionService client; throws when no `sessions` address was given. */
  get sessionService(): Client<typeof SessionService> {
    if (this.#sessions === undefined) {
      if (!this.#options.sessions) {
        throw new Error("AgentrtClient: no `sessions` address was given");
      }
      this.#sessions = createClient(SessionService, this.#transport(this.#options.sessions));
    }
    return this.#sessions;
  }

  /**
   * Start a run; resolves once the run is recorded, with its run id and session id.
   * @throws AgentrtError e.g. INVALID_ARGUMENT/INVALID_AGENT, NOT_FOUND/AGENT_NOT_FOUND,
   *   FAILED_PRECONDITION/SESSION_BUSY.
   */
  async startRun(request: StartRunInit): Promise<StartRunResponse> {
    return call(() => this.runService.startRun(create(StartRunRequest, request)));
  }

  /**
   * Iterate a run's events (or a session's) with automatic resume from the last seq; gaps are
   * yielded as `gap` events. A run's iteration ends after `streamEnd`. See `followEvents`.
   */
  events(target: string | EventTarget, options?: FollowOptions): AsyncGenerator<RunEvent, void, undefined> {
    const resolved = typeof target === "string" ? { runId: target } : target;
    return followEvents(this.runService, resolved, options);
  }

  /** Read a run's record. @throws AgentrtError NOT_FOUND/RUN_NOT_FOUND. */
  async getRun(runId: string): Promise<Run> {
    const response = await call(() => this.runService.getRun(create(GetRunRequestSchema, { runId })));
    return response.run!;
  }

  /**
   * Answer a suspended run: decisions for calls waiting for approval, results for
   * client-declared tools. Resolves with the run once the answer is accepted.
   * @throws AgentrtError FAILED_PRECONDITION/RUN_NOT_SUSPENDED (nothing waits, or the answer
   *   already landed), INVALID_ARGUMENT (a call id that is not pending).
   */
  async resumeRun(runId: string, decisions: Decision[], results: ExternalResult[] = []): Promise<Run> {
    const request = create(ResumeRunRequestSchema, { runId, decisions, results });
    const response = await call(() => this.runService.resumeRun(request));
    return response.run!;
  }

  /** Approve (or, with `approved: false`, deny) one pending call. See `resumeRun`. */
  async approve(runId: string, callId: string, approved = true, message = ""): Promise<Run> {
    return this.resumeRun(runId, [{ callId, approved, message }]);
  }

  /** Cancel a run (canceled is a terminal status, not an error). */
  async cancelRun(runId: string, reason = ""): Promise<Run> {
    const response = await call(() => this.runService.cancelRun(create(CancelRunRequestSchema, { runId, reason })));
    return response.run!;
  }

  /** Read a session's record. @throws AgentrtError NOT_FOUND/SESSION_NOT_FOUND. */
  async getSession(sessionId: string): Promise<Session> {
    const request = create(GetSessionRequestSchema, { session: { sessionId } });
    const response = await call(() => this.sessionService.getSession(request));
    return response.session!;
  }

  /** Read a session's raw log after a seq (all branches), in seq order; `limit` 0 = all. */
  async listEntries(sessionId: string, afterSeq = 0n, limit = 0): Promise<Entry[]> {
    const request = create(ListEntriesRequestSchema, { session: { sessionId }, afterSeq, limit });
    return (await call(() => this.sessionService.listEntries(request))).entries;
  }

  /** Read a session's context view: the active branch, updates folded, compacted entries left out. */
  async getContext(sessionId: string): Promise<Entry[]> {
    const request = create(GetContextRequestSchema, { session: { sessionId } });
    return (await call(() => this.sessionService.getContext(request))).entries;
  }
}

async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (thrown) {
    throw toAgentrtError(thrown);
  }
}
